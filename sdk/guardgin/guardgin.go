// Package guardgin is the gin middleware of the Guard Go SDK. It lives in
// its own module so that the SDK itself stays standard-library only:
// importing github.com/guardhq/guard/sdk brings no gin.
package guardgin

import (
	"github.com/gin-gonic/gin"

	"github.com/guardhq/guard/sdk"
)

// contextKey is where the Attempt is kept in the gin.Context.
const contextKey = "guard.attempt"

// Middleware returns a gin handler that checks m.Action for each request
// as sdk.Middleware does (same subject, failure policy and generic 429
// answers); m.Client and m.Action are required. An allowed request
// continues with the Attempt in both the gin.Context (AttemptFrom) and
// the request context (sdk.AttemptFrom); any other aborts the chain. A
// challenge is answered by m.OnChallenge (default sdk.WriteChallenge: 429
// challenge_required without Retry-After) and aborts the chain too: the
// handler runs only once m.ChallengePassed has verified the proof the
// client sends with its next try, so gin handlers never see an attempt
// Guard did not allow.
func Middleware(m *sdk.Middleware) gin.HandlerFunc {
	return func(c *gin.Context) {
		r, ok := m.Guard(c.Writer, c.Request)
		if !ok {
			c.Abort()
			return
		}
		c.Request = r
		c.Set(contextKey, sdk.AttemptFrom(r.Context()))
		c.Next()
	}
}

// AttemptFrom returns the Attempt Middleware stored in c, or nil.
func AttemptFrom(c *gin.Context) *sdk.Attempt {
	if v, ok := c.Get(contextKey); ok {
		a, _ := v.(*sdk.Attempt)
		return a
	}
	return nil
}
