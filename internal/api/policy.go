package api

import (
	"net/http"
	"sort"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/sdk"
)

// handlePolicy answers GET /v1/policy: the effective policy, which holds
// no keys or secrets by construction (abuse.Policy has none).
func (s *server) handlePolicy(c *gin.Context) {
	// The policy changes on reload, and names the allow and deny lists:
	// no cache may keep it.
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, wirePolicy(s.deps.Guard.Policy()))
}

func wirePolicy(p abuse.Policy) sdk.Policy {
	out := sdk.Policy{Actions: make(map[string]sdk.PolicyAction, len(p.Actions))}
	for name, a := range p.Actions {
		out.Actions[name] = sdk.PolicyAction{
			Limits:   wireRules(a.Limits, a.Shadow),
			Failures: wireRules(a.Failures, a.Shadow),
			Lockout: sdk.PolicyLockout{
				LadderMs:     millisList(a.Lockout.Ladder),
				DecayMs:      ceilMillis(a.Lockout.Decay),
				Ledger:       a.Lockout.Ledger,
				CountDenials: a.Lockout.CountDenials,
			},
			OnStoreFailure:  a.OnStoreFailure,
			Shadow:          a.Shadow,
			ReserveFailures: a.ReserveFailures,
		}
	}
	out.Lists = sdk.PolicyLists{Allow: wireList(p.Allow), Deny: wireList(p.Deny)}
	return out
}

// wireRules lists rules as enforced: each shadow when it says so or when
// its action is (a shadow action's rules never deny).
func wireRules(rules []abuse.Rule, actionShadow bool) []sdk.PolicyRule {
	out := make([]sdk.PolicyRule, 0, len(rules))
	for _, r := range rules {
		out = append(out, sdk.PolicyRule{
			Name:      r.Name,
			Dimension: r.Dimension,
			Limit:     r.Limit,
			WindowMs:  ceilMillis(r.Window),
			Shadow:    r.Shadow || actionShadow,
			Distinct:  r.Distinct,
			Algorithm: wireAlgorithm(r.Algorithm),
			OnLimit:   r.OnLimit,
		})
	}
	return out
}

// wireAlgorithm names a rule's algorithm on the wire: a policy that was
// not validated (tests' hand-made ones) leaves it empty, which is a log.
func wireAlgorithm(a string) string {
	if a == "" {
		return abuse.AlgLog
	}
	return a
}

func millisList(ds []time.Duration) []int64 {
	out := make([]int64, 0, len(ds))
	for _, d := range ds {
		out = append(out, ceilMillis(d))
	}
	return out
}

func wireList(l abuse.List) sdk.PolicyList {
	out := sdk.PolicyList{
		CIDRs:     make([]string, 0, len(l.CIDRs)),
		Users:     append([]string{}, l.Users...),
		Devices:   append([]string{}, l.Devices...),
		Countries: append([]string{}, l.Countries...),
	}
	for _, p := range l.CIDRs {
		out.CIDRs = append(out.CIDRs, p.String())
	}
	sort.Strings(out.CIDRs)
	return out
}
