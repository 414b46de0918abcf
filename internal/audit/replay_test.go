package audit

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestReplayOldestFirstReadOnly: Replay reads checks and reports of the
// range oldest first across pages (ties by id), leaves admin events and
// other actions out, and its connection refuses writes.
func TestReplayOldestFirstReadOnly(t *testing.T) {
	s := testPGStore(t, PGConfig{})
	ctx := context.Background()
	start := time.Now().UTC().Truncate(time.Millisecond).Add(-time.Hour)
	// Three events share each millisecond, so pages end inside ties.
	evs := genEvents("r", 50, start, time.Millisecond/3)
	evs[10].Kind, evs[10].Action = KindAdmin, "unlock"
	evs[11].Action = "signup"
	evs[12].Kind, evs[12].Outcome, evs[12].Decision, evs[12].Reason = KindReport, "failure", "", ""
	if err := s.Insert(ctx, evs); err != nil {
		t.Fatal(err)
	}
	r, err := OpenReplay(ctx, testDB.url)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	f := ReplayFilter{Since: start, Until: start.Add(time.Minute), Action: "login", PageSize: 7}
	var got []string
	if err := r.Replay(ctx, f, func(e Event) error { got = append(got, e.ID); return nil }); err != nil {
		t.Fatal(err)
	}
	var want []string
	for i, e := range evs {
		if i != 10 && i != 11 {
			want = append(want, e.ID)
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("replayed %v,\nwant %v", got, want)
	}
	if n, err := r.Count(ctx, f); err != nil || n != int64(len(want)) {
		t.Errorf("Count = %d, %v, want %d", n, err, len(want))
	}
	_, err = r.pool.Exec(ctx, "DELETE FROM audit_events")
	if err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("a write through the replay connection = %v, want a read-only transaction error", err)
	}
}
