package api

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/gin-gonic/gin"
	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/guardhq/guard/sdk"
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
	for _, ces := range c.Request.Header.Values("Content-Encoding") {
		for ce := range strings.SplitSeq(ces, ",") {
			if ce = strings.TrimSpace(ce); ce != "" && !strings.EqualFold(ce, "identity") {
				// A compressed body read as JSON would be garbage, and a
				// body that claims a coding it does not have is not what
				// was meant (RFC 9110 §8.4: 415).
				return nil, &Error{Status: http.StatusUnsupportedMediaType, Code: sdk.CodeUnsupportedMediaType,
					Message: fmt.Sprintf("Content-Encoding %q is not supported; send the JSON body uncompressed", ce)}
			}
		}
	}
	if c.Request.ContentLength > MaxBodyBytes {
		return nil, tooLarge(c)
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
		return nil, tooLarge(c)
	}
	return buf[:n], nil
}

// tooLarge answers a body over the limit, which Guard does not read (or
// reads no further), on a connection closed after the answer: net/http
// would otherwise read up to 256 KiB of the rest before answering, to
// keep the connection, and so answer a client that waits for the verdict
// before sending its body only when the read timed out (RFC 9110 §15.5.14
// lets a 413 close the connection).
func tooLarge(c *gin.Context) error {
	c.Header("Connection", "close")
	return errTooLarge
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

// decodeStrict decodes one JSON object into dst, a pointer to a struct
// with json tags, with github.com/go-json-experiment/json (what becomes
// encoding/json/v2), whose defaults are already strict where
// encoding/json is not: keys must match dst's json names exactly
// (encoding/json would take "ACTION" for "action") and appear once;
// strings must be valid UTF-8 without lone surrogate escapes
// (encoding/json silently turns those into U+FFFD, so two different inputs
// would collide) or raw control characters; one value and nothing after
// it. On top of that: the body must be an object, unknown keys are
// refused, and no string may hold NUL (Postgres cannot store it). Every
// failure is a 400 *Error naming the field when one is at fault.
func decodeStrict(body []byte, dst any) error {
	i := skipSpace(body, 0)
	if i == len(body) {
		return badRequest("", "request body is empty; expected a JSON object")
	}
	if body[i] != '{' {
		return badRequest("", "request body must be a JSON object")
	}
	if err := json.Unmarshal(body, dst, json.RejectUnknownMembers(true)); err != nil {
		return decodeError(err, dst)
	}
	// An escaped \u0000 is valid JSON; a raw NUL is a control character
	// the decoder has refused already.
	if bytes.Contains(body, []byte(`\u0000`)) {
		if field, ok := nulField(dst); ok {
			return badRequest(field, field+" must not contain NUL")
		}
	}
	return nil
}

// nulField finds a top-level field of dst (a pointer to a struct) with a
// string anywhere in it that holds a NUL, and returns its json name.
func nulField(dst any) (string, bool) {
	v := reflect.ValueOf(dst).Elem()
	names := jsonFields(dst).byIndex
	for i := range v.NumField() {
		if names[i] != "" && hasNUL(v.Field(i)) {
			return names[i], true
		}
	}
	return "", false
}

// hasNUL reports whether any string in v holds a NUL.
func hasNUL(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.String:
		return strings.IndexByte(v.String(), 0) >= 0
	case reflect.Pointer, reflect.Interface:
		return !v.IsNil() && hasNUL(v.Elem())
	case reflect.Struct:
		for i := range v.NumField() {
			if hasNUL(v.Field(i)) {
				return true
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			if hasNUL(v.Index(i)) {
				return true
			}
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			if hasNUL(it.Key()) || hasNUL(it.Value()) {
				return true
			}
		}
	}
	return false
}

// decodeError turns a decoding error into a 400 *Error, naming the
// top-level field it is in.
func decodeError(err error, dst any) error {
	var se *jsontext.SyntacticError
	var me *json.SemanticError
	switch {
	case errors.As(err, &se):
		field := topField(se.JSONPointer, dst)
		switch {
		case errors.Is(se.Err, jsontext.ErrDuplicateName):
			name := se.JSONPointer.LastToken()
			if !jsonFields(dst).set[name] {
				return badRequest(name, fmt.Sprintf("unknown field %q", name))
			}
			return badRequest(name, fmt.Sprintf("field %q appears more than once", name))
		case se.Err != nil && strings.Contains(se.Err.Error(), "invalid UTF-8"):
			if field == "" {
				return badRequest("", "a string is not valid UTF-8")
			}
			return badRequest(field, field+" is not valid UTF-8")
		case se.Err != nil && isSurrogateEscape(se.Err.Error()):
			if field == "" {
				return badRequest("", "a string contains a lone surrogate escape")
			}
			return badRequest(field, field+" contains a lone surrogate escape")
		case se.Err != nil && strings.Contains(se.Err.Error(), "control character"):
			if field == "" {
				return badRequest("", "a string contains a raw control character")
			}
			return badRequest(field, field+" contains a raw control character")
		case errors.Is(se.Err, io.ErrUnexpectedEOF):
			return badRequest("", "malformed JSON: unexpected end of input")
		}
		if se.JSONPointer == "" && se.ByteOffset > 0 && strings.Contains(se.Error(), "after top-level value") {
			return badRequest("", "unexpected data after the JSON object")
		}
		return badRequest(field, fmt.Sprintf("malformed JSON at byte %d", se.ByteOffset))
	case errors.As(err, &me):
		if errors.Is(me.Err, json.ErrUnknownName) {
			name := me.JSONPointer.LastToken()
			return badRequest(name, fmt.Sprintf("unknown field %q", name))
		}
		field := topField(me.JSONPointer, dst)
		if field == "" {
			return badRequest("", "malformed JSON")
		}
		want, got := typeName(me.GoType), kindName(me.JSONKind)
		switch {
		case want == "an integer" && errors.Is(me.Err, strconv.ErrRange):
			return badRequest(field, field+" is out of range")
		case want == "an integer" && got == "a number":
			// 1.5, 2.0 or 1e0: an integer field takes digits only.
			return badRequest(field, field+" must be an integer written without a fraction or exponent (such as 2)")
		}
		return badRequest(field, fmt.Sprintf("%s must be %s, not %s", field, want, got))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("", "malformed JSON: unexpected end of input")
	}
	return badRequest("", "malformed JSON")
}

// isSurrogateEscape reports whether an invalid escape sequence error is
// about a UTF-16 surrogate half (\uD800 to \uDFFF) without its partner.
func isSurrogateEscape(msg string) bool {
	if strings.Contains(msg, "surrogate") {
		return true
	}
	if !strings.Contains(msg, "invalid escape sequence") {
		return false
	}
	m := strings.ToLower(msg)
	for _, p := range []string{`\\ud8`, `\\ud9`, `\\uda`, `\\udb`, `\\udc`, `\\udd`, `\\ude`, `\\udf`} {
		if strings.Contains(m, p) {
			return true
		}
	}
	return false
}

// topField is the known top-level field a JSON pointer is in, or "".
func topField(p jsontext.Pointer, dst any) string {
	for tok := range p.Tokens() {
		if jsonFields(dst).set[tok] {
			return tok
		}
		return ""
	}
	return ""
}

// kindName says what a JSON value was, for type errors.
func kindName(k jsontext.Kind) string {
	switch k {
	case '"':
		return "a string"
	case '0':
		return "a number"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	case '{':
		return "an object"
	case '[':
		return "an array"
	}
	return "another value"
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
// fixed. Values are *fieldSet, never modified once stored.
var fieldNames sync.Map

// fieldSet is the json names of a struct type: as a set, and by field
// index ("" for a field without one).
type fieldSet struct {
	set     map[string]bool
	byIndex []string
}

// jsonFields returns the json names of the struct dst points to. The
// result is shared: callers must not modify it.
func jsonFields(dst any) *fieldSet {
	t := reflect.TypeOf(dst)
	if v, ok := fieldNames.Load(t); ok {
		return v.(*fieldSet)
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	fs := &fieldSet{set: map[string]bool{}}
	if t.Kind() == reflect.Struct {
		fs.byIndex = make([]string, t.NumField())
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
			fs.set[name] = true
			fs.byIndex[i] = name
		}
	}
	fieldNames.Store(reflect.TypeOf(dst), fs)
	return fs
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
