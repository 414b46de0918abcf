package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"

	"github.com/gin-gonic/gin"
)

// Scopes an API key can hold. ScopeAdmin implies the others.
const (
	ScopeCheck     = "check"
	ScopeAuditRead = "audit:read"
	ScopeAdmin     = "admin"
)

// Key is one API key from the config file. Exactly one of Key (the
// plaintext) and KeySHA256 (the hex SHA-256 of it) is set.
type Key struct {
	// Name identifies the key in logs and the audit trail; required and
	// unique.
	Name string
	// Scopes holds ScopeCheck, ScopeAuditRead and/or ScopeAdmin; at least
	// one.
	Scopes []string
	// Key is the plaintext key.
	Key string
	// KeySHA256 is the lowercase or uppercase hex SHA-256 of the key.
	KeySHA256 string
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
	out := make([]apiKey, 0, len(keys))
	names := map[string]bool{}
	for i, k := range keys {
		if k.Name == "" {
			return nil, fmt.Errorf("api key %d: name is required", i)
		}
		if names[k.Name] {
			return nil, fmt.Errorf("api key %q: name is used twice", k.Name)
		}
		names[k.Name] = true
		ak := apiKey{name: k.Name, scopes: map[string]bool{}}
		switch {
		case k.Key != "" && k.KeySHA256 != "":
			return nil, fmt.Errorf("api key %q: set key or key_sha256, not both", k.Name)
		case k.Key != "":
			ak.digest = sha256.Sum256([]byte(k.Key))
		case k.KeySHA256 != "":
			b, err := hex.DecodeString(k.KeySHA256)
			if err != nil || len(b) != sha256.Size {
				return nil, fmt.Errorf("api key %q: key_sha256 must be 64 hex digits", k.Name)
			}
			copy(ak.digest[:], b)
		default:
			return nil, fmt.Errorf("api key %q: key or key_sha256 is required", k.Name)
		}
		if len(k.Scopes) == 0 {
			return nil, fmt.Errorf("api key %q: at least one scope is required", k.Name)
		}
		for _, s := range k.Scopes {
			switch s {
			case ScopeCheck, ScopeAuditRead, ScopeAdmin:
				ak.scopes[s] = true
			default:
				return nil, fmt.Errorf("api key %q: unknown scope %q (want %s, %s or %s)",
					k.Name, s, ScopeCheck, ScopeAuditRead, ScopeAdmin)
			}
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
