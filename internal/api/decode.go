package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/gin-gonic/gin"
)

// MaxBodyBytes is the largest request body Guard reads (8 KiB); larger
// bodies are answered 413 too_large.
const MaxBodyBytes = 8 << 10

// readJSONBody checks the Content-Type (application/json, parameters such
// as charset allowed: else 415) and the size (at most MaxBodyBytes: else
// 413) and returns the body.
func readJSONBody(c *gin.Context) ([]byte, error) {
	mt, _, err := mime.ParseMediaType(c.GetHeader("Content-Type"))
	if err != nil || mt != "application/json" {
		return nil, errMediaType
	}
	if c.Request.ContentLength > MaxBodyBytes {
		return nil, errTooLarge
	}
	body, err := io.ReadAll(io.LimitReader(c.Request.Body, MaxBodyBytes+1))
	if err != nil {
		return nil, badRequest("", "could not read the request body")
	}
	if len(body) > MaxBodyBytes {
		return nil, errTooLarge
	}
	return body, nil
}

// decodeBody reads the request body and decodes it strictly into dst, a
// pointer to a struct with json tags; see decodeStrict.
func decodeBody(c *gin.Context, dst any) error {
	body, err := readJSONBody(c)
	if err != nil {
		return err
	}
	return decodeStrict(body, dst)
}

// decodeStrict decodes one JSON object into dst, stricter than
// encoding/json: the body must be one object and nothing after it; its
// keys must match dst's json names exactly (encoding/json would accept
// "ACTION" for "action") and appear once; strings must be valid UTF-8
// without NUL or lone surrogate escapes (encoding/json silently turns
// those into U+FFFD, so two different inputs would collide); values must
// have the field's type. Every failure is a 400 *Error naming the field
// when one is at fault.
func decodeStrict(body []byte, dst any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest("", "request body is empty; expected a JSON object")
	}
	keys, err := scanObject(body)
	if err != nil {
		return err
	}
	allowed := jsonFieldNames(dst)
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		if !allowed[k] {
			return badRequest(k, fmt.Sprintf("unknown field %q", k))
		}
		if seen[k] {
			return badRequest(k, fmt.Sprintf("field %q appears more than once", k))
		}
		seen[k] = true
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest("", "unexpected data after the JSON object")
	}
	return nil
}

// decodeError turns an encoding/json error into a 400 *Error.
func decodeError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		return badRequest(field, fmt.Sprintf("%s must be %s, not %s", field, typeName(te.Type), te.Value))
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return badRequest("", fmt.Sprintf("malformed JSON at byte %d: %s", se.Offset, se.Error()))
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return badRequest("", "malformed JSON: unexpected end of input")
	}
	if msg := err.Error(); strings.HasPrefix(msg, "json: unknown field ") {
		field := strings.Trim(strings.TrimPrefix(msg, "json: unknown field "), `"`)
		return badRequest(field, fmt.Sprintf("unknown field %q", field))
	}
	return badRequest("", "malformed JSON")
}

func typeName(t reflect.Type) string {
	if t == nil {
		return "of another type"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Pointer:
		return typeName(t.Elem())
	}
	return "of another type"
}

// jsonFieldNames returns the json names of the struct dst points to.
func jsonFieldNames(dst any) map[string]bool {
	t := reflect.TypeOf(dst)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	names := map[string]bool{}
	if t.Kind() != reflect.Struct {
		return names
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		names[name] = true
	}
	return names
}

// scanObject checks that body starts a JSON object, returns its top-level
// keys in order (raw duplicates included), and rejects any string, key or
// value, holding invalid UTF-8, a NUL (raw or escaped), a raw control
// character or a lone surrogate escape. The error names the top-level
// field the bad string belongs to. Syntax errors are left to
// encoding/json, which runs next; scanObject only has to never misread a
// well-formed document and never panic on a malformed one.
func scanObject(body []byte) ([]string, error) {
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return nil, badRequest("", "request body must be a JSON object")
	}
	var keys []string
	depth := 0
	expectKey := false
	field := ""
	for i < len(body) {
		switch body[i] {
		case '"':
			end, problem := scanString(body, i)
			isKey := depth == 1 && expectKey
			if problem != "" {
				if isKey {
					return nil, badRequest("", "an object key "+problem)
				}
				if field == "" {
					return nil, badRequest("", "a string "+problem)
				}
				return nil, badRequest(field, field+" "+problem)
			}
			if isKey {
				var k string
				if json.Unmarshal(body[i:end], &k) != nil {
					return keys, nil // malformed; encoding/json will say how
				}
				keys = append(keys, k)
				field = k
				expectKey = false
			}
			i = end
			continue
		case '{', '[':
			depth++
			if depth == 1 {
				expectKey = true
			}
		case '}', ']':
			depth--
		case ',':
			if depth == 1 {
				expectKey = true
			}
		}
		i++
	}
	return keys, nil
}

// scanString scans the JSON string starting at body[start] (a quote) and
// returns the index after its closing quote and a description of what is
// wrong with it, or "".
func scanString(body []byte, start int) (end int, problem string) {
	i := start + 1
	for i < len(body) {
		b := body[i]
		switch {
		case b == '"':
			return i + 1, ""
		case b == '\\':
			if i+1 >= len(body) {
				return len(body), ""
			}
			if body[i+1] != 'u' {
				i += 2
				continue
			}
			r, ok := hex4(body, i+2)
			if !ok {
				return len(body), "" // malformed escape: a syntax error
			}
			switch {
			case r == 0:
				return 0, "must not contain NUL"
			case r >= 0xD800 && r < 0xDC00:
				if i+12 <= len(body) && body[i+6] == '\\' && body[i+7] == 'u' {
					if lo, ok := hex4(body, i+8); ok && lo >= 0xDC00 && lo <= 0xDFFF {
						i += 12
						continue
					}
				}
				return 0, "contains a lone surrogate escape"
			case r >= 0xDC00 && r <= 0xDFFF:
				return 0, "contains a lone surrogate escape"
			}
			i += 6
		case b == 0:
			return 0, "must not contain NUL"
		case b < 0x20:
			return 0, "contains a raw control character"
		case b >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(body[i:])
			if r == utf8.RuneError && size <= 1 {
				return 0, "is not valid UTF-8"
			}
			i += size
		default:
			i++
		}
	}
	return len(body), ""
}

// hex4 parses the four hex digits at body[i:i+4].
func hex4(body []byte, i int) (rune, bool) {
	if i+4 > len(body) {
		return 0, false
	}
	var r rune
	for _, c := range body[i : i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			r |= rune(c-'A') + 10
		default:
			return 0, false
		}
	}
	return r, true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
