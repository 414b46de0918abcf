package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/gin-gonic/gin"
)

// Scopes an API key can hold. ScopeAdmin implies the others.
const (
	ScopeCheck     = "check"
	ScopeAuditRead = "audit:read"
	ScopeAdmin     = "admin"
)

// Scopes lists every scope, in the order messages name them.
var Scopes = []string{ScopeCheck, ScopeAuditRead, ScopeAdmin}

// Key is one configured API key. Exactly one of Key (the plaintext) and
// SHA256 (its digest, as the config file's key_sha256 gives it) is set; the
// API keeps only the digest.
type Key struct {
	// Name identifies the key in logs and the audit trail; required and
	// unique.
	Name string
	// Scopes holds ScopeCheck, ScopeAuditRead and/or ScopeAdmin; at least
	// one, each once.
	Scopes []string
	// Key is the plaintext key.
	Key string
	// SHA256 is the SHA-256 of the key.
	SHA256 [sha256.Size]byte
}

// Digest is the key's SHA-256, from whichever form it was given in.
func (k Key) Digest() [sha256.Size]byte {
	if k.Key != "" {
		return sha256.Sum256([]byte(k.Key))
	}
	return k.SHA256
}

// KeyError is one problem of the configured keys. It says where the
// problem is, so internal/config can point at the config file's line.
type KeyError struct {
	// Index is the key's position in Config.Keys.
	Index int
	// Field is "name", "scopes" or "key".
	Field string
	// Message says what is wrong.
	Message string
	// Prior, when >= 0, is the position of the key this one clashes with
	// (a name or a key used twice).
	Prior int
}

func (e *KeyError) Error() string {
	msg := fmt.Sprintf("api key %d: %s", e.Index, e.Message)
	if e.Prior >= 0 {
		msg += fmt.Sprintf(" by api key %d", e.Prior)
	}
	return msg
}

// ValidateKeys checks keys: names required and unique, at least one known
// scope each (none twice), exactly one of Key and SHA256, no key configured
// twice. The error joins one *KeyError per problem.
func ValidateKeys(keys []Key) error {
	var errs []error
	fail := func(i int, field string, prior int, format string, args ...any) {
		errs = append(errs, &KeyError{Index: i, Field: field, Prior: prior, Message: fmt.Sprintf(format, args...)})
	}
	names := map[string]int{}
	digests := map[[sha256.Size]byte]int{}
	for i, k := range keys {
		if k.Name == "" {
			fail(i, "name", -1, "name is required")
		} else if j, dup := names[k.Name]; dup {
			fail(i, "name", j, "key name %q is already used", k.Name)
		} else {
			names[k.Name] = i
		}
		if len(k.Scopes) == 0 {
			fail(i, "scopes", -1, "scopes are required (%s)", strings.Join(Scopes, ", "))
		}
		seen := map[string]bool{}
		for _, s := range k.Scopes {
			if !slices.Contains(Scopes, s) {
				fail(i, "scopes", -1, "unknown scope %q (known: %s)", s, strings.Join(Scopes, ", "))
			} else if seen[s] {
				fail(i, "scopes", -1, "scope %q is listed twice", s)
			}
			seen[s] = true
		}
		switch {
		case k.Key != "" && k.SHA256 != [sha256.Size]byte{}:
			fail(i, "key", -1, "give the key or its SHA-256, not both")
			continue
		case k.Key == "" && k.SHA256 == [sha256.Size]byte{}:
			fail(i, "key", -1, "the key (or its SHA-256) is required")
			continue
		}
		d := k.Digest()
		if j, dup := digests[d]; dup {
			fail(i, "key", j, "the same key is already configured")
		}
		digests[d] = i
	}
	return errors.Join(errs...)
}

// apiKey is a configured key as the middleware compares it.
type apiKey struct {
	name   string
	digest [sha256.Size]byte
	scopes map[string]bool
}

func (k apiKey) has(scope string) bool { return k.scopes[ScopeAdmin] || k.scopes[scope] }

// compileKeys validates the configured keys and keeps only their digests.
func compileKeys(keys []Key) ([]apiKey, error) {
	if err := ValidateKeys(keys); err != nil {
		return nil, err
	}
	out := make([]apiKey, 0, len(keys))
	for _, k := range keys {
		ak := apiKey{name: k.Name, digest: k.Digest(), scopes: map[string]bool{}}
		for _, s := range k.Scopes {
			ak.scopes[s] = true
		}
		out = append(out, ak)
	}
	return out, nil
}

// lookup finds the key whose digest matches the presented key and returns
// a pointer into keys (so handing it to handlers copies nothing). It hashes
// the presented key (so comparisons are of equal length) and compares it
// with every configured digest without stopping at a match, so the time
// taken says nothing about which key, if any, matched.
func lookup(keys []apiKey, presented string) (*apiKey, bool) {
	d := sha256.Sum256([]byte(presented))
	found := -1
	for i := range keys {
		eq := subtle.ConstantTimeCompare(d[:], keys[i].digest[:])
		found = subtle.ConstantTimeSelect(eq, i, found)
	}
	if found < 0 {
		return nil, false
	}
	return &keys[found], true
}

// bearer extracts the token of an "Authorization: Bearer <token>" header;
// the scheme is case-insensitive (RFC 9110).
func bearer(h string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// requireScope authenticates the request (401 when the key is missing or
// unknown) and authorises it for scope (403 otherwise).
func requireScope(keys []apiKey, scope string) gin.HandlerFunc {
	return authorize(keys, scope, false)
}

// requireBrowserScope is requireScope for the review pages: a browser
// cannot send a Bearer header, so HTTP Basic with the API key as the
// password (any user name) is accepted as well, and a 401 asks the browser
// for it with WWW-Authenticate.
func requireBrowserScope(keys []apiKey, scope string) gin.HandlerFunc {
	return authorize(keys, scope, true)
}

func authorize(keys []apiKey, scope string, basic bool) gin.HandlerFunc {
	return func(c *gin.Context) {
		token, ok := bearer(c.GetHeader("Authorization"))
		if !ok && basic {
			if _, pw, isBasic := c.Request.BasicAuth(); isBasic && pw != "" {
				token, ok = pw, true
			}
		}
		var k *apiKey
		if ok {
			k, ok = lookup(keys, token)
		}
		if !ok {
			if basic {
				c.Header("WWW-Authenticate", `Basic realm="Guard review pages", charset="UTF-8"`)
			}
			writeError(c, errUnauthenticated)
			return
		}
		if st := stateFrom(c); st != nil {
			st.key = k
		} else {
			c.Set(ctxState, &reqState{base: slog.New(slog.DiscardHandler), key: k})
		}
		if !k.has(scope) {
			writeError(c, errForbidden)
			return
		}
		c.Next()
	}
}

// keyFrom returns the authenticated key of the request.
func keyFrom(c *gin.Context) (apiKey, bool) {
	st := stateFrom(c)
	if st == nil || st.key == nil {
		return apiKey{}, false
	}
	return *st.key, true
}

// keyName is the authenticated key's name ("" before authentication).
func keyName(c *gin.Context) string {
	k, _ := keyFrom(c)
	return k.name
}
