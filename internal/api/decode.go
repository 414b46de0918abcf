package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"reflect"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/gin-gonic/gin"
)

// MaxBodyBytes is the largest request body Guard reads (8 KiB); larger
// bodies are answered 413 too_large.
const MaxBodyBytes = 8 << 10

// bodyBuffers holds the buffers request bodies are read into (each
// MaxBodyBytes+1 long, one more than allowed, to see an oversized body);
// the decoded values never alias them, so a buffer goes back once decoded.
var bodyBuffers = sync.Pool{New: func() any {
	b := make([]byte, MaxBodyBytes+1)
	return &b
}}

// readJSONBody checks the Content-Type (application/json, parameters such
// as charset allowed: else 415) and the size (at most MaxBodyBytes: else
// 413) and reads the body into buf (MaxBodyBytes+1 long), returning the
// part read.
func readJSONBody(c *gin.Context, buf []byte) ([]byte, error) {
	mt, _, err := mime.ParseMediaType(c.GetHeader("Content-Type"))
	if err != nil || mt != "application/json" {
		return nil, errMediaType
	}
	if c.Request.ContentLength > MaxBodyBytes {
		return nil, errTooLarge
	}
	// What io.ReadAll(io.LimitReader(body, MaxBodyBytes+1)) reads, into
	// a reused buffer: up to EOF or one byte past the limit, failing on
	// any other error.
	n := 0
	for n < len(buf) {
		m, err := c.Request.Body.Read(buf[n:])
		n += m
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, badRequest("", "could not read the request body")
		}
	}
	if n > MaxBodyBytes {
		return nil, errTooLarge
	}
	return buf[:n], nil
}

// decodeBody reads the request body and decodes it strictly into dst, a
// pointer to a struct with json tags; see decodeStrict.
func decodeBody(c *gin.Context, dst any) error {
	bp := bodyBuffers.Get().(*[]byte)
	defer bodyBuffers.Put(bp)
	body, err := readJSONBody(c, *bp)
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
	fields := jsonFields(dst)
	var keyArr [8]string // room for every key of the request types
	keys, err := scanObject(body, fields.list, keyArr[:0])
	if err != nil {
		return err
	}
	for i, k := range keys {
		if !fields.set[k] {
			return badRequest(k, fmt.Sprintf("unknown field %q", k))
		}
		// Every key before this one is allowed and distinct, so this scan
		// is at most as long as dst has fields.
		if slices.Contains(keys[:i], k) {
			return badRequest(k, fmt.Sprintf("field %q appears more than once", k))
		}
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

// fieldNames caches jsonFields by type: the request types are few and
// fixed, and walking their tags by reflection on every request was a
// measurable share of decoding. Values are *fieldSet, never modified once
// stored.
var fieldNames sync.Map

// fieldSet is the json names of a struct type, as a set and as a list.
type fieldSet struct {
	set  map[string]bool
	list []string
}

// jsonFields returns the json names of the struct dst points to. The
// result is shared: callers must not modify it.
func jsonFields(dst any) *fieldSet {
	t := reflect.TypeOf(dst)
	if v, ok := fieldNames.Load(t); ok {
		return v.(*fieldSet)
	}
	fs := &fieldSet{set: structFieldNames(t)}
	for name := range fs.set {
		fs.list = append(fs.list, name)
	}
	slices.Sort(fs.list)
	fieldNames.Store(t, fs)
	return fs
}

func structFieldNames(t reflect.Type) map[string]bool {
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

// scanObject checks that body starts a JSON object, appends its top-level
// keys in order (raw duplicates included) to keys and returns them, and
// rejects any string, key or
// value, holding invalid UTF-8, a NUL (raw or escaped), a raw control
// character or a lone surrogate escape. The error names the top-level
// field the bad string belongs to. Syntax errors are left to
// encoding/json, which runs next; scanObject only has to never misread a
// well-formed document and never panic on a malformed one.
// A key equal to one of names is returned as that string, without
// allocating a copy.
func scanObject(body []byte, names, keys []string) ([]string, error) {
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return nil, badRequest("", "request body must be a JSON object")
	}
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
				if end-i >= 2 && body[end-1] == '"' && bytes.IndexByte(body[i+1:end-1], '\\') < 0 {
					// No escapes, and scanString has checked the bytes are
					// valid UTF-8 without control characters: exactly what
					// encoding/json would return, without its machinery.
					k = knownOr(names, body[i+1:end-1])
				} else {
					// Declared here so that only escaped keys pay for the
					// heap variable Unmarshal needs.
					var esc string
					if json.Unmarshal(body[i:end], &esc) != nil {
						return keys, nil // malformed; encoding/json will say how
					}
					k = esc
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

// knownOr returns the element of names equal to raw, else a copy of raw.
func knownOr(names []string, raw []byte) string {
	for _, n := range names {
		if n == string(raw) {
			return n
		}
	}
	return string(raw)
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
