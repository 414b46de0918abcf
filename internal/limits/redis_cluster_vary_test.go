package limits

import (
	"context"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/testenv"
)

// TestRedisClusterUndoVarying: a decision over three slots denied by one
// takes back the others' shares: a log's entry and a distinct set's value
// holding spaces (its undo carries the value outside the spec).
func TestRedisClusterUndoVarying(t *testing.T) {
	addrs := testenv.PrivateRedisCluster(t)
	s := newClusterTestStore(t, addrs)
	ctx := context.Background()
	p := "guardtest:" + time.Now().Format("150405.000000") + ":"
	full := Rule{Key: "{c}" + p + "l2", Limit: 1, Window: time.Hour}
	if res, err := s.Check(ctx, &CheckRequest{Rules: []Rule{full}, Cost: 1}); err != nil || !res.Allowed {
		t.Fatalf("fill: %+v %v", res, err)
	}
	log := Rule{Key: "{a}" + p + "l1", Limit: 1, Window: time.Hour}
	set := Rule{Key: "{b}" + p + "d1", Limit: 1, Window: time.Hour, Distinct: " a b c d"}
	bucket := Rule{Key: "{b}" + p + "b1", Limit: 1, Window: time.Hour, Algorithm: AlgBucket, Challenge: true, Passed: true}
	res, err := s.Check(ctx, &CheckRequest{Rules: []Rule{log, set, bucket, full}, Cost: 1})
	if err != nil || res.Allowed {
		t.Fatalf("spanning check: %+v %v, want denied", res, err)
	}
	other := set
	other.Distinct = "x y z w "
	res, err = s.Check(ctx, &CheckRequest{Rules: []Rule{log, other, {Key: bucket.Key, Limit: 1, Window: time.Hour, Algorithm: AlgBucket}}, Cost: 1})
	if err != nil || !res.Allowed {
		t.Fatalf("after the rollback: %+v %v, want allowed (log, set and bucket taken back)", res, err)
	}
}
