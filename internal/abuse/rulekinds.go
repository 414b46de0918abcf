package abuse

import (
	"encoding/base64"
	"fmt"

	"github.com/guardhq/guard/internal/limits"
)

// Rule kinds of contract v1.1: distinct-count rules (Rule.Distinct, for
// password spraying) and the counter and bucket algorithms
// (Rule.Algorithm, for large budgets). Their validation, their Redis key
// kinds and their distinct values live here; internal/limits decides them.

// MaxCounterLimit bounds the limit of a counter or bucket rule: their state
// is O(1) whatever the limit (two counts, or a token level), so budgets in
// the millions per day are fine; the bound keeps counts within 32 bits.
const MaxCounterLimit = 1_000_000_000

// MaxDistinctLimit bounds a distinct rule's limit: its set keeps one
// 14-byte member per distinct value and is searched on every attempt, so
// it is meant for tens to hundreds of values (OWASP's spraying signals),
// not for budgets.
const MaxDistinctLimit = 10_000

// kindProblem is one problem validateKind found: the field and message.
type kindProblem struct{ field, msg string }

// validateKind checks a rule's algorithm and distinct field and fills the
// algorithm's default (AlgLog), so the effective policy names it.
func validateKind(r *Rule, failure bool) []kindProblem {
	var ps []kindProblem
	switch r.Algorithm {
	case "":
		r.Algorithm = AlgLog
	case AlgLog:
	case AlgCounter, AlgBucket:
		switch {
		case failure:
			ps = append(ps, kindProblem{"algorithm", fmt.Sprintf("failure rules are always logs: algorithm %q is only for limits", r.Algorithm)})
		case r.Distinct != "":
			ps = append(ps, kindProblem{"algorithm", fmt.Sprintf("a distinct rule counts a set of values: algorithm %q does not apply", r.Algorithm)})
		}
	default:
		ps = append(ps, kindProblem{"algorithm", fmt.Sprintf("unknown algorithm %q (known: log, counter, bucket)", r.Algorithm)})
	}
	switch r.Distinct {
	case "":
	case DimUser, DimDevice:
		if d, ok := parseDim(r.Dimension); ok && dimHas(d, r.Distinct) {
			ps = append(ps, kindProblem{"distinct", fmt.Sprintf("distinct %q must differ from the dimension %q (which already fixes it)", r.Distinct, r.Dimension)})
		}
	default:
		ps = append(ps, kindProblem{"distinct", fmt.Sprintf("distinct must be user or device, not %q", r.Distinct)})
	}
	return ps
}

// ruleMaxLimit is the largest limit a rule of r's kind may have.
func ruleMaxLimit(r *Rule) int {
	switch {
	case r.Distinct != "":
		return MaxDistinctLimit
	case r.Algorithm == AlgCounter || r.Algorithm == AlgBucket:
		return MaxCounterLimit
	}
	return MaxRuleLimit
}

// distinctSuffix is the default-name part of a distinct rule,
// "/distinct-user"; "" for other rules.
func distinctSuffix(r *Rule) string {
	if r.Distinct == "" {
		return ""
	}
	return "/distinct-" + r.Distinct
}

// dimHas reports whether dimension d includes the field (user or device).
func dimHas(d dimIndex, field string) bool {
	switch field {
	case DimUser:
		return d == dimUser || d == dimUserIP || d == dimUserDevice
	case DimDevice:
		return d == dimDevice || d == dimUserDevice
	}
	return false
}

// limitsAlgorithm maps a validated algorithm name to the store's.
func limitsAlgorithm(name string) limits.Algorithm {
	switch name {
	case AlgCounter:
		return limits.AlgCounter
	case AlgBucket:
		return limits.AlgBucket
	}
	return limits.AlgLog
}

// ruleKind is the Redis key kind of a rule: each kind of state has its own
// letter, so a log and a set that share a rule name (in two actions) never
// share a key. Logs keep "l:" and "f:".
func ruleKind(r *Rule, failure bool) string {
	switch {
	case r.Distinct != "":
		return "d:" + r.Name
	case r.Algorithm == AlgCounter:
		return "c:" + r.Name
	case r.Algorithm == AlgBucket:
		return "b:" + r.Name
	case failure:
		return failKind(r.Name)
	}
	return logKind(r.Name)
}

// distinctDim is the dimension index of a distinct field.
func distinctDim(field string) dimIndex {
	if field == DimDevice {
		return dimDevice
	}
	return dimUser
}

// distinctValue is the request's distinct value for a rule counting field
// d: the first limits.DistinctBytes bytes of d's keyed hash (already a
// key's tag, so the store learns nothing new). The caller makes sure the
// field is present.
func (k *keyer) distinctValue(id *identity, d dimIndex) string {
	h := k.hash(id, d)
	raw, err := base64.RawURLEncoding.DecodeString(h[:12]) // 9 bytes
	if err != nil {
		// Unreachable: the hash is base64url by construction.
		return h[:limits.DistinctBytes]
	}
	return string(raw[:limits.DistinctBytes])
}

// distinctValue is r's distinct value for the request, "" for a rule that
// counts attempts.
func (g *Guard) distinctValue(r *compiledRule, id *identity) string {
	if !r.hasDistinct {
		return ""
	}
	return g.keys.distinctValue(id, r.distinct)
}
