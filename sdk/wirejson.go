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
	if r.Phone != nil {
		dst = append(dst, `,"phone":`...)
		dst = appendJSONString(dst, *r.Phone)
	}
	if r.Cost != nil {
		dst = append(dst, `,"cost":`...)
		dst = strconv.AppendInt(dst, int64(*r.Cost), 10)
	}
	if r.DryRun {
		dst = append(dst, `,"dry_run":true`...)
	}
	if r.ChallengePassed {
		dst = append(dst, `,"challenge_passed":true`...)
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
