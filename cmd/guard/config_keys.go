package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
)

// hexKeyRE is a SHA-256 in hex.
var hexKeyRE = regexp.MustCompile(`^[0-9a-fA-F]{64}$`)

func (d *yamlDecoder) decodeAPIKeys(f field) []APIKey {
	var keys []APIKey
	names := map[string]int{}
	hashes := map[[32]byte]int{}
	for i, n := range d.sequence(f.val, "api_keys") {
		what := fmt.Sprintf("api_keys[%d]", i)
		m := d.mapping(n, what, "name", "scopes", "key", "key_sha256")
		var k APIKey
		if nf, ok := m["name"]; ok {
			d.str(nf, what+".name", &k.Name)
		}
		if k.Name == "" {
			d.errorf(n, "%s: name is required", what)
		} else if line, dup := names[k.Name]; dup {
			d.errorf(m["name"].val, "%s: key name %q is already used on line %d", what, k.Name, line)
		} else {
			names[k.Name] = m["name"].val.Line
		}
		if sf, ok := m["scopes"]; ok {
			d.strings(sf, what+".scopes", &k.Scopes)
			seen := map[string]bool{}
			for _, s := range k.Scopes {
				if !contains(scopes, s) {
					d.errorf(sf.val, "%s.scopes: unknown scope %q (known: %s)", what, s, strings.Join(scopes, ", "))
				} else if seen[s] {
					d.errorf(sf.val, "%s.scopes: scope %q is listed twice", what, s)
				}
				seen[s] = true
			}
		}
		if len(k.Scopes) == 0 {
			d.errorf(n, "%s: scopes are required (check, audit:read, admin)", what)
		}
		plain, hasPlain := m["key"]
		hashed, hasHashed := m["key_sha256"]
		switch {
		case hasPlain && hasHashed:
			d.errorf(n, "%s: give key or key_sha256, not both", what)
		case hasPlain:
			var s string
			d.str(plain, what+".key", &s)
			if s == "" {
				d.errorf(plain.val, "%s.key must not be empty", what)
			}
			k.SHA256 = sha256.Sum256([]byte(s))
		case hasHashed:
			var s string
			d.str(hashed, what+".key_sha256", &s)
			if !hexKeyRE.MatchString(s) {
				d.errorf(hashed.val, "%s.key_sha256 must be 64 hex digits (sha256sum of the key)", what)
			} else {
				b, _ := hex.DecodeString(s)
				copy(k.SHA256[:], b)
			}
		default:
			d.errorf(n, "%s: key or key_sha256 is required", what)
		}
		if k.SHA256 != ([32]byte{}) {
			if line, dup := hashes[k.SHA256]; dup {
				d.errorf(n, "%s: the same key is already configured on line %d", what, line)
			}
			hashes[k.SHA256] = n.Line
		}
		keys = append(keys, k)
	}
	return keys
}
