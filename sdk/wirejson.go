package sdk

import (
	"strconv"
	"unicode/utf8"
)

// appendCheckRequest appends json.Marshal(r)'s bytes to dst without
// reflection: every check sends one (wirejson_test.go holds it to
// encoding/json, fuzzed).
func appendCheckRequest(dst []byte, r *CheckRequest) []byte {
	dst = append(dst, `{"action":`...)
	dst = appendJSONString(dst, r.Action)
	if r.User != nil {
		dst = append(dst, `,"user":`...)
		dst = appendJSONString(dst, *r.User)
	}
	if r.IP != nil {
		dst = append(dst, `,"ip":`...)
		dst = appendJSONString(dst, *r.IP)
	}
	if r.Device != nil {
		dst = append(dst, `,"device":`...)
		dst = appendJSONString(dst, *r.Device)
	}
	if r.Cost != nil {
		dst = append(dst, `,"cost":`...)
		dst = strconv.AppendInt(dst, int64(*r.Cost), 10)
	}
	if r.DryRun {
		dst = append(dst, `,"dry_run":true`...)
	}
	return append(dst, '}')
}

// AppendJSON appends json.Marshal(r)'s bytes to dst without reflection:
// Guard's server writes every check answer with it.
func (r *CheckResponse) AppendJSON(dst []byte) []byte {
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
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	dst = append(dst, `,"lockout":`...)
	if r.Lockout == nil {
		dst = append(dst, "null"...)
	} else {
		// sdk.Lockout's MarshalJSON: the wire time format.
		dst = append(dst, `{"dimension":`...)
		dst = appendJSONString(dst, r.Lockout.Dimension)
		dst = append(dst, `,"until":`...)
		dst = appendJSONString(dst, FormatTime(r.Lockout.Until))
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
