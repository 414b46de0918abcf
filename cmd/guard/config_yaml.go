package main

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// ConfigError is one problem in a config file, with the line it is on (0 when
// the problem belongs to the whole file or to an environment variable).
type ConfigError struct {
	File string
	Line int
	Msg  string
}

func (e *ConfigError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// yamlDecoder walks a yaml.Node tree and collects every problem it meets, so
// an operator sees all of them at once instead of fixing one per restart.
type yamlDecoder struct {
	file string
	errs []error
}

func (d *yamlDecoder) errorf(n *yaml.Node, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	d.errs = append(d.errs, &ConfigError{File: d.file, Line: line, Msg: fmt.Sprintf(format, args...)})
}

func (d *yamlDecoder) err() error { return errors.Join(d.errs...) }

// yamlLineRE finds the line in the parser's own messages ("yaml: line 3: ...").
var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parseYAML parses data into its document node, turning the parser's syntax
// errors into FILE:LINE errors.
func parseYAML(file string, data []byte) (*yaml.Node, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		msg := err.Error()
		if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
			line, _ := strconv.Atoi(m[1])
			return nil, &ConfigError{File: file, Line: line, Msg: "invalid YAML: " + m[2]}
		}
		return nil, &ConfigError{File: file, Msg: "invalid YAML: " + strings.TrimPrefix(msg, "yaml: ")}
	}
	return &doc, nil
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
		return fmt.Sprintf("%q", n.Value)
	}
	return "something else"
}

// field is a mapping entry: the key node (for its line) and the value node.
type field struct {
	key *yaml.Node
	val *yaml.Node
}

// mapping checks that n is a mapping (or empty) whose keys are all in
// allowed, each at most once, and returns the entries by key. what names the
// mapping in messages ("api_keys[0]", "actions.login").
func (d *yamlDecoder) mapping(n *yaml.Node, what string, allowed ...string) map[string]field {
	out := map[string]field{}
	n = resolve(n)
	if isNull(n) {
		return out
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, "%s must be a mapping, not %s", what, kindName(n))
		return out
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, "%s: keys must be plain names", what)
			continue
		}
		if k.ShortTag() == "!!merge" {
			d.errorf(k, "%s: merge keys (<<) are not supported", what)
			continue
		}
		if allowed != nil && !contains(allowed, k.Value) {
			d.errorf(k, "%s: unknown key %q (known: %s)", what, k.Value, strings.Join(sortedCopy(allowed), ", "))
			continue
		}
		if prev, dup := out[k.Value]; dup {
			d.errorf(k, "%s: key %q appears twice (first on line %d)", what, k.Value, prev.key.Line)
			continue
		}
		out[k.Value] = field{key: k, val: v}
	}
	return out
}

// entries returns the mapping's entries in file order; used where the keys
// are names chosen by the operator (actions) and order matters for messages.
func (d *yamlDecoder) entries(n *yaml.Node, what string) []field {
	n = resolve(n)
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, "%s must be a mapping, not %s", what, kindName(n))
		return nil
	}
	var out []field
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := resolve(n.Content[i])
		if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" {
			d.errorf(k, "%s: keys must be plain names", what)
			continue
		}
		if line, dup := seen[k.Value]; dup {
			d.errorf(k, "%s: key %q appears twice (first on line %d)", what, k.Value, line)
			continue
		}
		seen[k.Value] = k.Line
		out = append(out, field{key: k, val: n.Content[i+1]})
	}
	return out
}

// sequence checks that n is a list (or empty) and returns its items.
func (d *yamlDecoder) sequence(n *yaml.Node, what string) []*yaml.Node {
	n = resolve(n)
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, "%s must be a list, not %s", what, kindName(n))
		return nil
	}
	out := make([]*yaml.Node, len(n.Content))
	for i, c := range n.Content {
		out[i] = resolve(c)
	}
	return out
}

// scalar returns n's text, or ok=false (with an error) when n is not a scalar.
// An empty value (null) is "".
func (d *yamlDecoder) scalar(n *yaml.Node, what string) (string, bool) {
	n = resolve(n)
	if isNull(n) {
		return "", true
	}
	if n.Kind != yaml.ScalarNode {
		d.errorf(n, "%s must be a single value, not %s", what, kindName(n))
		return "", false
	}
	return n.Value, true
}

func (d *yamlDecoder) str(f field, what string, dst *string) {
	if s, ok := d.scalar(f.val, what); ok {
		*dst = s
	}
}

func (d *yamlDecoder) boolean(f field, what string, dst *bool) {
	n := resolve(f.val)
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
		d.errorf(n, "%s must be true or false, not %s", what, kindName(n))
		return
	}
	var b bool
	if err := n.Decode(&b); err != nil {
		d.errorf(n, "%s must be true or false, not %s", what, kindName(n))
		return
	}
	*dst = b
}

// integer decodes a whole number within [lo, hi].
func (d *yamlDecoder) integer(f field, what string, lo, hi int, dst *int) {
	n := resolve(f.val)
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		d.errorf(n, "%s must be a whole number, not %s", what, kindName(n))
		return
	}
	v, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
	if err != nil || v < int64(lo) || v > int64(hi) {
		d.errorf(n, "%s must be between %d and %d, not %s", what, lo, hi, n.Value)
		return
	}
	*dst = int(v)
}

// duration decodes a Go duration ("1m", "24h") of at least min, in whole
// milliseconds (the unit every store and the wire use).
func (d *yamlDecoder) duration(n *yaml.Node, what string, min time.Duration, dst *time.Duration) bool {
	n = resolve(n)
	s, ok := d.scalar(n, what)
	if !ok {
		return false
	}
	v, err := time.ParseDuration(s)
	switch {
	case s == "" || err != nil:
		d.errorf(n, "%s: %q is not a duration (Go syntax such as 500ms, 15m, 24h)", what, s)
		return false
	case v < min:
		d.errorf(n, "%s must be at least %s, not %s", what, fmtDuration(min), s)
		return false
	case v%time.Millisecond != 0:
		d.errorf(n, "%s must be whole milliseconds, not %s", what, s)
		return false
	}
	*dst = v
	return true
}

// strings decodes a list of non-empty strings.
func (d *yamlDecoder) strings(f field, what string, dst *[]string) {
	var out []string
	for i, n := range d.sequence(f.val, what) {
		s, ok := d.scalar(n, fmt.Sprintf("%s[%d]", what, i))
		if !ok {
			continue
		}
		if s == "" {
			d.errorf(n, "%s[%d] must not be empty", what, i)
			continue
		}
		out = append(out, s)
	}
	*dst = out
}

// prefixes decodes a list of CIDRs; a bare address is a single-host prefix.
func (d *yamlDecoder) prefixes(f field, what string, dst *[]netip.Prefix) {
	var out []netip.Prefix
	for i, n := range d.sequence(f.val, what) {
		s, ok := d.scalar(n, fmt.Sprintf("%s[%d]", what, i))
		if !ok {
			continue
		}
		p, err := parsePrefix(s)
		if err != nil {
			d.errorf(n, "%s[%d]: %v", what, i, err)
			continue
		}
		out = append(out, p)
	}
	*dst = out
}

// parsePrefix parses "10.0.0.0/8" or "203.0.113.7" (a /32). IPv4-mapped
// IPv6 prefixes are unmapped so they match IPv4 clients. A prefix with host
// bits set is refused: "10.0.0.1/8" is almost always a typo.
func parsePrefix(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("%q is not an IP address or CIDR", s)
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR", s)
	}
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("%q has host bits set (did you mean %s?)", s, p.Masked())
	}
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func sortedCopy(list []string) []string {
	out := append([]string(nil), list...)
	sort.Strings(out)
	return out
}

// fmtDuration prints d the way an operator would write it ("1ms", "1m", "24h").
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
