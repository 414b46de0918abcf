package api

import (
	"net/http"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/guardhq/guard/sdk"
)

// The answer of POST /v1/check is written by appendCheckResponse instead
// of encoding/json: it is on every decision, its shape is fixed, and
// reflection was the larger part of writing it. The SDK's types define the
// fields; the encoder lives here, with the server, so the public SDK
// exports no server-only helpers.

// jsonContentType is the Content-Type gin's c.JSON sets.
var jsonContentType = []string{"application/json; charset=utf-8"}

// jsonBuffers holds the buffers check answers are built in.
var jsonBuffers = sync.Pool{New: func() any {
	b := make([]byte, 0, 512)
	return &b
}}

// writeCheckJSON answers 200 with r as c.JSON would: the same status,
// Content-Type (unless already set) and body.
func writeCheckJSON(c *gin.Context, r *sdk.CheckResponse) {
	bp := jsonBuffers.Get().(*[]byte)
	buf := appendCheckResponse((*bp)[:0], r)
	c.Status(http.StatusOK)
	h := c.Writer.Header()
	if len(h["Content-Type"]) == 0 {
		h["Content-Type"] = jsonContentType
	}
	if _, err := c.Writer.Write(buf); err != nil {
		_ = c.Error(err) // as gin's Render does
		c.Abort()
	}
	if cap(buf) <= 64<<10 { // a huge answer is not worth keeping
		*bp = buf
		jsonBuffers.Put(bp)
	}
}

// appendCheckResponse appends the check answer r to dst without
// reflection, in the exact form the SDK's fast decoder reads: the fields
// of sdk.CheckResponse in order, times in sdk.TimeFormat. Without a
// lockout the bytes are json.Marshal(r)'s (checkjson_test.go, fuzzed).
func appendCheckResponse(dst []byte, r *sdk.CheckResponse) []byte {
	dst = append(dst, `{"decision":`...)
	dst = appendJSONString(dst, r.Decision)
	dst = append(dst, `,"reason":`...)
	dst = appendJSONString(dst, r.Reason)
	dst = append(dst, `,"retry_after_ms":`...)
	dst = strconv.AppendInt(dst, r.RetryAfterMs, 10)
	dst = append(dst, `,"decision_id":`...)
	dst = appendJSONString(dst, r.DecisionID)
	dst = append(dst, `,"degraded":`...)
	dst = strconv.AppendBool(dst, r.Degraded)
	dst = append(dst, `,"limits":`...)
	if r.Limits == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i := range r.Limits {
			l := &r.Limits[i]
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"rule":`...)
			dst = appendJSONString(dst, l.Rule)
			dst = append(dst, `,"dimension":`...)
			dst = appendJSONString(dst, l.Dimension)
			dst = append(dst, `,"limit":`...)
			dst = strconv.AppendInt(dst, int64(l.Limit), 10)
			dst = append(dst, `,"window_ms":`...)
			dst = strconv.AppendInt(dst, l.WindowMs, 10)
			dst = append(dst, `,"remaining":`...)
			dst = strconv.AppendInt(dst, int64(l.Remaining), 10)
			dst = append(dst, `,"reset_ms":`...)
			dst = strconv.AppendInt(dst, l.ResetMs, 10)
			dst = append(dst, `,"algorithm":`...)
			dst = appendJSONString(dst, l.Algorithm)
			if l.Distinct != "" {
				dst = append(dst, `,"distinct":`...)
				dst = appendJSONString(dst, l.Distinct)
			}
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	dst = append(dst, `,"lockout":`...)
	if r.Lockout == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, `{"dimension":`...)
		dst = appendJSONString(dst, r.Lockout.Dimension)
		dst = append(dst, `,"until":`...)
		dst = appendJSONString(dst, sdk.FormatTime(r.Lockout.Until))
		dst = append(dst, `,"level":`...)
		dst = strconv.AppendInt(dst, int64(r.Lockout.Level), 10)
		dst = append(dst, '}')
	}
	return append(dst, '}')
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s quoted as encoding/json quotes strings (with
// its default HTML escaping): \" \\ \b \f \n \r \t, other control bytes,
// < > & as \u00XX, invalid UTF-8 as \ufffd, U+2028 and U+2029 escaped.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
