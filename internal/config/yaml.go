package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Error is one problem in a config file, with the line it is on (0 when the
// problem belongs to the whole file or to an environment variable, whose
// name is then File).
type Error struct {
	File string
	Line int
	Msg  string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// maxQuoted is how many bytes of a value a problem repeats.
const maxQuoted = 64

// quote is how a problem shows a value of the file or the environment:
// Go-quoted and bounded by clip, so a file of garbage is not echoed whole.
func quote(s string) string {
	head, rest := clip(s)
	return strconv.Quote(head) + rest
}

// bare is quote without the quotes, for values that already parsed as a
// number or a duration ("limit: 010", "window: 0s").
func bare(s string) string {
	head, rest := clip(s)
	return head + rest
}

// clip bounds every value a problem repeats: s whole when it is at most
// maxQuoted bytes, else its first maxQuoted bytes (cut at a character
// boundary) and "…" with s's length.
func clip(s string) (head, rest string) {
	if len(s) <= maxQuoted {
		return s, ""
	}
	n := maxQuoted
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n], fmt.Sprintf("… (%d bytes)", len(s))
}

// decoder fills Go values from a yaml.Node tree by their `yaml` struct tags
// and collects every problem it meets, so an operator sees all of them at
// once instead of fixing one per restart. It is stricter than yaml.v3's own
// decoding (with KnownFields): durations are Go durations in whole
// milliseconds, numbers are never strings, merge keys are refused, and each
// message names the key's full path. Struct tags besides `yaml`:
//
//	min, max   bounds of an int or time.Duration field ("1", "1ms")
//	required   "true": the key must be given
//
// Every decoded path ("actions.login.limits[0].window") remembers its line,
// so problems found after decoding (the policy's own validation) still
// point at the file.
type decoder struct {
	file  string
	errs  []error
	lines map[string]int
	// bad holds the paths whose value the decoder rejected, a required
	// key that is missing included: what is there (or below) is a zero
	// stand-in, so later checks of it would only invent problems.
	bad map[string]bool
	// faulted holds the mappings the decoder rejected a key of (unknown,
	// twice, a merge key): their other keys were read.
	faulted map[string]bool
}

func newDecoder(file string) *decoder {
	return &decoder{file: file, lines: map[string]int{}, bad: map[string]bool{}, faulted: map[string]bool{}}
}

func firstString(args []any) (string, bool) {
	if len(args) == 0 {
		return "", false
	}
	s, ok := args[0].(string)
	return s, ok
}

// errorf reports that the value at n is wrong.
func (d *decoder) errorf(n *yaml.Node, format string, args ...any) {
	// Every message starts with the path it is about: remember it, so
	// the policy's validation does not report the same value again.
	if p, ok := firstString(args); ok && strings.HasPrefix(format, "%s") {
		d.bad[p] = true
	}
	d.report(lineOf(n), format, args...)
}

// keyErrorf reports a wrong key of the mapping at path; the mapping's
// other keys are still read.
func (d *decoder) keyErrorf(n *yaml.Node, path, format string, args ...any) {
	d.faulted[path] = true
	d.report(lineOf(n), "%s: "+format, append([]any{path}, args...)...)
}

// report reports a problem at line, unconditionally.
func (d *decoder) report(line int, format string, args ...any) {
	d.errs = append(d.errs, &Error{File: d.file, Line: line, Msg: fmt.Sprintf(format, args...)})
}

func lineOf(n *yaml.Node) int {
	if n == nil {
		return 0
	}
	return n.Line
}

// errorAt reports a problem of the value at path, at its line (0 when
// unknown), unless the decoder has already rejected that value: a check
// of its zero stand-in ("" for a value that was not a string) would only
// invent a second problem.
func (d *decoder) errorAt(path string, format string, args ...any) {
	if !d.bad[path] {
		d.report(d.lines[path], format, args...)
	}
}

// has reports whether path was in the file.
func (d *decoder) has(path string) bool {
	_, ok := d.lines[path]
	return ok
}

func (d *decoder) err() error { return errors.Join(d.errs...) }

// yamlLineRE finds the line in the parser's own messages ("yaml: line 3: ...").
var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parseYAML parses data into its document node, turning the parser's syntax
// errors into FILE:LINE errors. The file must hold one YAML document: a
// second one would otherwise be silently ignored, and Guard would run on a
// config it half read. Empty documents after the first (a file ending in
// "---") hold nothing to ignore and are accepted.
func parseYAML(file string, data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return &doc, nil // comments only: an empty config
	} else if err != nil {
		return nil, yamlError(file, err)
	}
	for {
		var more yaml.Node
		err := dec.Decode(&more)
		if errors.Is(err, io.EOF) {
			return &doc, nil
		}
		if err != nil {
			return nil, yamlError(file, err)
		}
		if !emptyDocument(&more) {
			return nil, &Error{File: file, Line: more.Line, Msg: "the file holds more than one YAML document"}
		}
	}
}

// emptyDocument reports whether n is a document with nothing in it (not
// even an explicit null such as "~").
func emptyDocument(n *yaml.Node) bool {
	if len(n.Content) == 0 {
		return true
	}
	c := n.Content[0]
	return len(n.Content) == 1 && c.Kind == yaml.ScalarNode && c.ShortTag() == "!!null" && c.Value == "" &&
		c.Style == 0 && c.Anchor == ""
}

// yamlError turns a parser error into a FILE:LINE error where it has a line.
func yamlError(file string, err error) error {
	msg := err.Error()
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &Error{File: file, Line: line, Msg: "invalid YAML: " + m[2]}
	}
	return &Error{File: file, Msg: "invalid YAML: " + strings.TrimPrefix(msg, "yaml: ")}
}

// resolve follows aliases so anchors (&x / *x) work anywhere.
func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	n = resolve(n)
	return n == nil || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			return "empty"
		}
		return quote(n.Value)
	}
	return "something else"
}

// nodeDecoder is a type that decodes itself (an API key's two spellings).
type nodeDecoder interface {
	decodeNode(d *decoder, n *yaml.Node, path string)
}

var (
	durationType    = reflect.TypeFor[time.Duration]()
	prefixType      = reflect.TypeFor[netip.Prefix]()
	nodeDecoderType = reflect.TypeFor[nodeDecoder]()
)

// bounds are a field's min and max tags.
type bounds struct{ min, max string }

// decode fills v (addressable) from n; path names it in messages.
func (d *decoder) decode(n *yaml.Node, path string, v reflect.Value, b bounds) {
	n = resolve(n)
	if v.CanAddr() && v.Addr().Type().Implements(nodeDecoderType) {
		v.Addr().Interface().(nodeDecoder).decodeNode(d, n, path)
		return
	}
	switch t := v.Type(); {
	case t == durationType:
		d.duration(n, path, b, v)
	case t == prefixType:
		s, ok := d.scalar(n, path)
		if !ok {
			return
		}
		p, err := parsePrefix(s)
		if err != nil {
			d.errorf(n, "%s: %v", path, err)
			return
		}
		v.Set(reflect.ValueOf(p))
	case t.Kind() == reflect.Pointer:
		if isNull(n) {
			return
		}
		p := reflect.New(t.Elem())
		d.decode(n, path, p.Elem(), b)
		v.Set(p)
	case t.Kind() == reflect.Struct:
		d.structure(n, path, v)
	case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String:
		d.dictionary(n, path, v)
	case t.Kind() == reflect.Slice:
		d.list(n, path, v)
	case t.Kind() == reflect.String:
		if s, ok := d.scalar(n, path); ok {
			// min on a string: a value given explicitly (not null) must be
			// that long; an empty one is no way of asking for the default.
			if b.min != "" && !isNull(n) {
				if m, _ := strconv.Atoi(b.min); len(s) < m {
					d.errorf(n, "%s must not be empty (leave it out for the default)", path)
					return
				}
			}
			v.SetString(s)
		}
	case t.Kind() == reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
			d.errorf(n, "%s must be true or false, not %s", path, kindName(n))
			return
		}
		var x bool
		if err := n.Decode(&x); err != nil {
			d.errorf(n, "%s must be true or false, not %s", path, kindName(n))
			return
		}
		v.SetBool(x)
	case t.Kind() == reflect.Int:
		d.integer(n, path, b, v)
	default:
		// A section type this decoder does not know: a bug, reported
		// rather than panicked on (TestDecodeEveryFieldType keeps it away).
		d.errorf(n, "%s: internal error: cannot decode into %s", path, t)
	}
}

// line records where path is: a collection at its key's line (where an
// operator looks for "actions.login"), a scalar at its value's.
func (d *decoder) mark(path string, key, val *yaml.Node) {
	val = resolve(val)
	if key != nil && (val == nil || val.Kind != yaml.ScalarNode) {
		d.lines[path] = key.Line
		return
	}
	if val != nil {
		d.lines[path] = val.Line
	}
}

// entry is a mapping entry.
type entry struct{ key, val *yaml.Node }

// entries checks that n is a mapping (or empty) of plain, distinct keys and
// returns them in file order.
func (d *decoder) entries(n *yaml.Node, path string) []entry {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, "%s must be a mapping, not %s", path, kindName(n))
		return nil
	}
	var out []entry
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := resolve(n.Content[i])
		if k.Kind != yaml.ScalarNode {
			d.keyErrorf(k, path, "keys must be plain names")
			continue
		}
		if k.ShortTag() == "!!merge" {
			d.keyErrorf(k, path, "merge keys (<<) are not supported")
			continue
		}
		if line, dup := seen[k.Value]; dup {
			d.keyErrorf(k, path, "key %s appears twice (first on line %d)", quote(k.Value), line)
			continue
		}
		seen[k.Value] = k.Line
		out = append(out, entry{k, n.Content[i+1]})
	}
	return out
}

func join(path, key string) string {
	if path == "" || path == "config" {
		return key
	}
	return path + "." + key
}

// structure decodes a mapping into a struct whose fields carry yaml tags;
// any other key is an error naming the known ones.
func (d *decoder) structure(n *yaml.Node, path string, v reflect.Value) {
	t := v.Type()
	fields := map[string]int{}
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); name != "" && name != "-" {
			fields[name] = i
		}
	}
	given := map[string]bool{}
	for _, e := range d.entries(n, path) {
		given[e.key.Value] = true
		i, ok := fields[e.key.Value]
		if !ok {
			known := make([]string, 0, len(fields))
			for k := range fields {
				known = append(known, k)
			}
			slices.Sort(known)
			d.keyErrorf(e.key, path, "unknown key %s (known: %s)", quote(e.key.Value), strings.Join(known, ", "))
			continue
		}
		f := t.Field(i)
		p := join(path, e.key.Value)
		d.mark(p, e.key, e.val)
		d.decode(e.val, p, v.Field(i), bounds{f.Tag.Get("min"), f.Tag.Get("max")})
	}
	if isNull(n) || n.Kind != yaml.MappingNode {
		return
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if f.Tag.Get("required") == "true" && !given[name] {
			d.bad[join(path, name)] = true
			d.keyErrorf(n, path, "%s is required", name)
		}
	}
}

// dictionary decodes a mapping whose keys the operator chooses (action
// names) into a map.
func (d *decoder) dictionary(n *yaml.Node, path string, v reflect.Value) {
	es := d.entries(n, path)
	if v.IsNil() || len(es) > 0 {
		v.Set(reflect.MakeMapWithSize(v.Type(), len(es)))
	}
	for _, e := range es {
		p := join(path, e.key.Value)
		d.mark(p, e.key, e.val)
		item := reflect.New(v.Type().Elem()).Elem()
		d.decode(e.val, p, item, bounds{})
		v.SetMapIndex(reflect.ValueOf(e.key.Value).Convert(v.Type().Key()), item)
	}
}

// list decodes a sequence; an explicit empty list ([]) gives an empty, not
// a nil, slice, so "given but empty" stays distinguishable from "absent".
func (d *decoder) list(n *yaml.Node, path string, v reflect.Value) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, "%s must be a list, not %s", path, kindName(n))
		return
	}
	out := reflect.MakeSlice(v.Type(), 0, len(n.Content))
	for i, c := range n.Content {
		p := fmt.Sprintf("%s[%d]", path, i)
		d.mark(p, nil, c)
		item := reflect.New(v.Type().Elem()).Elem()
		d.decode(c, p, item, bounds{})
		out = reflect.Append(out, item)
	}
	v.Set(out)
}

// scalar returns n's text, or ok=false (with an error) when n is not a scalar.
// An empty value (null) is "".
func (d *decoder) scalar(n *yaml.Node, path string) (string, bool) {
	if isNull(n) {
		return "", true
	}
	if n.Kind != yaml.ScalarNode {
		d.errorf(n, "%s must be a single value, not %s", path, kindName(n))
		return "", false
	}
	return n.Value, true
}

// integer decodes a whole number within the field's bounds.
func (d *decoder) integer(n *yaml.Node, path string, b bounds, v reflect.Value) {
	// YAML tags a run of digits too long for an int64 a float: still a
	// whole number, out of range (below), not "not a whole number".
	long := n.Kind == yaml.ScalarNode && n.ShortTag() == "!!float" && wholeDigits(n.Value)
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" && !long {
		d.errorf(n, "%s must be a whole number, not %s", path, kindName(n))
		return
	}
	digits := strings.TrimLeft(strings.ReplaceAll(n.Value, "_", ""), "+-")
	if len(digits) > 1 && digits[0] == '0' && digits[1] >= '0' && digits[1] <= '9' {
		// YAML 1.1 (and ParseInt's base 0) read 010 as octal 8, YAML 1.2
		// as 10: either way not what most writers of it meant.
		d.errorf(n, "%s: %s has a leading zero; write it without (0o… for octal)", path, bare(n.Value))
		return
	}
	x, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
	lo, hi := int64(-1<<63), int64(1<<63-1)
	if b.min != "" {
		lo, _ = strconv.ParseInt(b.min, 10, 64)
	}
	if b.max != "" {
		hi, _ = strconv.ParseInt(b.max, 10, 64)
	}
	if errors.Is(err, strconv.ErrRange) && b.min == "" && b.max == "" {
		size := "large"
		if strings.HasPrefix(n.Value, "-") {
			size = "small"
		}
		d.errorf(n, "%s: %s is too %s", path, bare(n.Value), size)
		return
	}
	if err != nil || x < lo || x > hi || int64(int(x)) != x {
		d.errorf(n, "%s must be between %d and %d, not %s", path, lo, hi, bare(n.Value))
		return
	}
	v.SetInt(x)
}

// wholeDigits reports whether s is a decimal whole number: digits (and
// YAML's _ separators) after an optional sign.
func wholeDigits(s string) bool {
	s = strings.TrimLeft(s, "+-")
	if s == "" {
		return false
	}
	for _, r := range s {
		if (r < '0' || r > '9') && r != '_' {
			return false
		}
	}
	return true
}

// duration decodes a Go duration ("1m", "24h") of at least the field's
// min, in whole milliseconds (the unit every store and the wire use).
func (d *decoder) duration(n *yaml.Node, path string, b bounds, v reflect.Value) {
	s, ok := d.scalar(n, path)
	if !ok {
		return
	}
	x, err := ParseDuration(s)
	if err != nil {
		d.errorf(n, "%s: %v", path, err)
		return
	}
	if b.min != "" {
		if lo, _ := time.ParseDuration(b.min); x < lo {
			d.errorf(n, "%s must be at least %s, not %s", path, Duration(lo), bare(s))
			return
		}
	}
	v.SetInt(int64(x))
}

// Duration is a duration as the config file writes it: Go syntax in whole
// milliseconds ("500ms", "15m", "24h"); its String is how an operator
// would write it ("1m", not "1m0s").
type Duration time.Duration

// durationSyntax is what time.ParseDuration reads, whatever its size.
var durationSyntax = regexp.MustCompile(`^[-+]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$`)

// ParseDuration reads a config duration: Go syntax, whole milliseconds.
func ParseDuration(s string) (time.Duration, error) {
	v, err := time.ParseDuration(s)
	if err != nil && durationSyntax.MatchString(s) {
		// Well formed, but past time.Duration's 292 years.
		return 0, fmt.Errorf("%s is too long a duration", quote(s))
	}
	if s == "" || err != nil {
		return 0, fmt.Errorf("%s is not a duration (Go syntax such as 500ms, 15m, 24h)", quote(s))
	}
	if v%time.Millisecond != 0 {
		return 0, fmt.Errorf("must be whole milliseconds, not %s", bare(s))
	}
	return v, nil
}

func (d Duration) String() string {
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// UnmarshalYAML lets Duration stand in yaml.v3-decoded structs too.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	v, err := ParseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration as the file would.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// parsePrefix parses "10.0.0.0/8" or "203.0.113.7" (a /32). IPv4-mapped
// IPv6 prefixes are unmapped so they match IPv4 clients. A prefix with host
// bits set is refused: "10.0.0.1/8" is almost always a typo.
func parsePrefix(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("%s is not an IP address or CIDR", quote(s))
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%s is not a CIDR", quote(s))
	}
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("%s has host bits set (did you mean %s?)", quote(s), p.Masked())
	}
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p, nil
}
