package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/internal/api"
)

// The sections whose validation belongs to their package (the API keys to
// api.ValidateKeys, the policy to abuse.Policy.Validate): their problems,
// positioned in the package's terms, pointed at the file's lines.

// sendableKey reports whether key can arrive whole in "Authorization:
// Bearer <key>": HTTP (RFC 9110 §5.5) strips a field value's surrounding
// space and tab, the API trims the token's surrounding white space
// (api's bearer), and Go's server refuses control characters but tab in a
// field value, so a key with either is one no request can present.
func sendableKey(key string) bool {
	if strings.TrimSpace(key) != key {
		return false
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// apiKeys turns the api_keys entries into api.Keys (digests only) and
// points api.ValidateKeys's problems at their lines.
func (d *decoder) apiKeys(entries []apiKey) []api.Key {
	keys := make([]api.Key, len(entries))
	bad := map[int]bool{}
	for i, e := range entries {
		at := fmt.Sprintf("api_keys[%d]", i)
		k := api.Key{Name: e.Name, Scopes: e.Scopes}
		switch {
		case e.Key != nil && e.KeySHA256 != nil:
			d.errorAt(at, "%s: give key or key_sha256, not both", at)
			bad[i] = true
		case e.Key != nil:
			if *e.Key == "" {
				d.errorAt(at+".key", "%s.key must not be empty", at)
				bad[i] = true
			} else if !sendableKey(*e.Key) {
				d.errorAt(at+".key", "%s.key cannot be sent in an Authorization header (HTTP trims surrounding white space and refuses control characters), so no request could authenticate with it", at)
				bad[i] = true
			}
			k.SHA256 = sha256.Sum256([]byte(*e.Key))
		case e.KeySHA256 != nil:
			b, err := hex.DecodeString(*e.KeySHA256)
			if err != nil || len(b) != sha256.Size {
				d.errorAt(at+".key_sha256", "%s.key_sha256 must be 64 hex digits (sha256sum of the key)", at)
				bad[i] = true
			}
			copy(k.SHA256[:], b)
		default:
			d.errorAt(at, "%s: key or key_sha256 is required", at)
			bad[i] = true
		}
		keys[i] = k
	}
	var errs []error
	if err := api.ValidateKeys(keys); err != nil {
		errs = unjoin(err)
	}
	for _, err := range errs {
		var ke *api.KeyError
		if !errors.As(err, &ke) {
			d.errs = append(d.errs, err)
			continue
		}
		if ke.Field == "key" && bad[ke.Index] {
			continue // already reported in the file's own terms
		}
		at := fmt.Sprintf("api_keys[%d]", ke.Index)
		path := at + "." + ke.Field
		if ke.Field == "key" || !d.has(path) {
			path = at
		}
		msg := ke.Message
		if ke.Prior >= 0 {
			prior := fmt.Sprintf("api_keys[%d]", ke.Prior)
			if ke.Field == "name" {
				prior += ".name"
			}
			msg += " on line " + strconv.Itoa(d.lines[prior])
		}
		d.errorAt(path, "%s: %s", at, msg)
	}
	return keys
}

// validatePolicy runs abuse's validation (which also fills defaults and
// normalises list users) and points each problem at the file's line,
// leaving out those about a value the decoder has already rejected, or
// one below it (a limit that was not a number is not also "below 1", a
// ladder step that was not a duration not also "at least 1ms").
func (d *decoder) validatePolicy(cfg *Config) {
	err := cfg.Guard.Policy.Validate()
	if err == nil {
		return
	}
	for _, e := range unjoin(err) {
		var pe *abuse.PolicyError
		if !errors.As(e, &pe) {
			d.errs = append(d.errs, fmt.Errorf("%s: policy: %w", d.file, e))
			continue
		}
		if !cfg.PolicyFromFile && pe.Action != "" {
			d.errs = append(d.errs, fmt.Errorf("%s: built-in default policy: %w", d.file, e))
			continue
		}
		paths := policyPaths(pe)
		if slices.ContainsFunc(paths, func(p string) bool { return d.bad[p] }) {
			continue // the decoder has said what is wrong with this value
		}
		if pe.Section == "" && pe.Field == "" && d.faulted[paths[0]] {
			continue // an action without rules but with a misspelt key: the key is the problem
		}
		line, msg := d.policyLine(paths), pe.Error()
		if pe.PriorIndex >= 0 {
			msg = strings.TrimSuffix(msg, fmt.Sprintf(" by %s[%d]", pe.PriorSection, pe.PriorIndex))
			prior := fmt.Sprintf("actions.%s.%s[%d]", pe.Action, pe.PriorSection, pe.PriorIndex)
			msg += " on line " + strconv.Itoa(d.lines[prior])
		}
		d.errs = append(d.errs, &Error{File: d.file, Line: line, Msg: msg})
	}
}

// policyLine finds the most precise line known for a policy problem, of
// the paths policyPaths gives.
func (d *decoder) policyLine(paths []string) int {
	for _, p := range paths {
		if line, ok := d.lines[p]; ok {
			return line
		}
	}
	return 0
}

// policyPaths lists the file paths a policy problem may be about, most
// precise first: the value's (in either spelling, "lists.allow[1].cidrs"
// and "lists.allow.cidrs[1]"), then those of what holds it. A problem under
// a value the decoder rejected is the decoder's problem seen again.
func policyPaths(e *abuse.PolicyError) []string {
	var base, sec string
	switch {
	case e.Action != "":
		base = "actions." + e.Action
		sec = base
		if e.Section != "" && e.Section != "name" {
			sec = base + "." + e.Section
		}
	case e.Section == "allow" || e.Section == "deny":
		base = "lists"
		sec = "lists." + e.Section
	default:
		base, sec = "actions", "actions"
	}
	var paths []string
	if e.Index >= 0 {
		i := fmt.Sprintf("[%d]", e.Index)
		if e.Field != "" {
			paths = append(paths, sec+i+"."+e.Field, sec+"."+e.Field+i)
		}
		paths = append(paths, sec+i)
	}
	if e.Field != "" {
		paths = append(paths, sec+"."+e.Field)
	}
	return append(paths, sec, base)
}

// unjoin splits an errors.Join result into its errors.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
