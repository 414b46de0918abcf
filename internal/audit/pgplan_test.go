package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// planRows is how many events TestQueryPlansUseIndexes writes before it
// reads the plans; GUARD_AUDIT_PLAN_ROWS overrides it (docs/performance.md
// was checked with 1000000).
func planRows(t *testing.T) int {
	n := 250000
	if v := os.Getenv("GUARD_AUDIT_PLAN_ROWS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1000 {
			t.Fatalf("GUARD_AUDIT_PLAN_ROWS=%q: want an integer of at least 1000", v)
		}
	}
	return n
}

// TestQueryPlansUseIndexes holds buildWhere to the indexes of the
// migrations: on a trail shaped like production's (mostly allowed logins
// with 'ok', random identifiers, busy ones and rare reasons), every filter
// of GET /v1/audit is answered by index scans in the order of the listing,
// under a Limit, with no Sort of the matching rows (an Incremental Sort of
// ties within one millisecond is fine). pgx prepares every query, and
// Postgres may switch a prepared statement to its generic plan after five
// runs: the generic plans must use the same indexes (the partial ones
// included, which is what the inlined literals are for), but may sort, as
// they did before migration 000003 (a generic plan cannot know that $1 is
// a busy address and takes a sort of few rows as cheap). Below about 250k
// events Postgres rightly prefers fetching a busy user's rows and sorting
// them, so the default size is that.
func TestQueryPlansUseIndexes(t *testing.T) {
	ctx := context.Background()
	s := testPGStore(t, PGConfig{})
	n := planRows(t)
	now := time.Now().UTC().Truncate(time.Millisecond)
	// The hour of events stays within one day's partition: in the first
	// hour after midnight it would span two, and the older one would hold
	// no rows past the cursor, so Postgres rightly walks its primary key
	// (that is how CI failed at 00:01 UTC). Events up to an hour ahead of
	// the clock land in today's partition all the same.
	if day := now.Truncate(24 * time.Hour); now.Sub(day) < time.Hour+time.Minute {
		now = day.Add(time.Hour + time.Minute)
	}
	// Events over the last hour, newest first. The filtered values match
	// many events (a fifth of them share the hot user, device, phone and
	// address; a tenth each have the rare reasons), which is when reading
	// in order and stopping after "limit" matters; for a handful of matches
	// Postgres rightly fetches them all and sorts them.
	if _, err := s.pool.Exec(ctx, `INSERT INTO audit_events
		(at, id, kind, action, decision, reason, user_id, ip, ip_addr, device, phone)
		SELECT $1::timestamptz - make_interval(secs => i * 3600.0 / $2), lpad(i::text, 26, '0'),
			CASE WHEN i % 100 = 7 THEN 'report' ELSE 'check' END,
			CASE WHEN i % 10 = 3 THEN 'signup' WHEN i % 1000 = 5 THEN 'unlock' ELSE 'login' END,
			CASE WHEN i % 10 IN (1, 2) THEN 'deny' WHEN i % 10 = 4 THEN 'challenge' ELSE 'allow' END,
			CASE WHEN i % 10 = 1 THEN 'rate_limited' WHEN i % 10 = 2 THEN 'locked_out'
				WHEN i % 10 = 4 THEN 'challenge_required' ELSE 'ok' END,
			CASE WHEN i % 5 = 0 THEN 'hot-user' ELSE 'u' || i END,
			ip, CASE WHEN ip LIKE 'h:%' THEN NULL ELSE ip::inet END,
			CASE WHEN i % 5 = 0 THEN 'hot-device' ELSE 'd' || i END,
			CASE WHEN i % 5 = 0 THEN '+447400123456' WHEN i % 5 = 1 THEN '+4474' || i END
		FROM (SELECT i, CASE WHEN i % 5 = 0 THEN '203.0.113.5'
				WHEN i % 10 = 1 THEN 'h:hot' WHEN i % 10 = 3 THEN 'h:' || i
				ELSE '10.' || (i / 65536 % 256) || '.' || (i / 256 % 256) || '.' || (i % 256) END AS ip
			FROM generate_series(1, $2) AS i) AS g`, now, n); err != nil {
		t.Fatalf("fill: %v", err)
	}
	if _, err := s.pool.Exec(ctx, `ANALYZE audit_events`); err != nil {
		t.Fatal(err)
	}
	var filled []string // the partitions that hold the events
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT tableoid::regclass::text FROM audit_events`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var p string
		rows.Scan(&p)
		filled = append(filled, p)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	cursor := &Cursor{At: now.Add(-30 * time.Minute), ID: lpadID(n / 2)}
	tests := []struct {
		name string
		f    Filter
		// want is in the Index Cond of the scan of every filled partition,
		// or "pkey" for a walk along the primary key.
		want string
		// sorted allows a Sort: a CIDR range matches many addresses, whose
		// rows the index returns in address order.
		sorted bool
	}{
		{"newest first", Filter{}, "pkey", false},
		{"cursor", Filter{Cursor: cursor}, "pkey", false},
		{"since until", Filter{Since: now.Add(-40 * time.Minute), Until: now.Add(-20 * time.Minute)}, "pkey", false},
		{"user", Filter{User: "hot-user"}, "hashtextextended(user_id", false},
		{"user cursor", Filter{User: "hot-user", Cursor: cursor}, "hashtextextended(user_id", false},
		{"user since", Filter{User: "hot-user", Since: now.Add(-10 * time.Minute)}, "hashtextextended(user_id", false},
		{"device", Filter{Device: "hot-device"}, "hashtextextended(device", false},
		{"phone", Filter{Phone: "+447400123456"}, "hashtextextended(phone", false},
		{"ip address", Filter{IP: netip.MustParsePrefix("203.0.113.5/32")}, "ip_addr =", false},
		{"ip address cursor", Filter{IP: netip.MustParsePrefix("203.0.113.5/32"), Cursor: cursor}, "ip_addr =", false},
		// A range of addresses: the address index and a Sort, or (the
		// generic plan, which cannot tell how wide $1 is) the primary key
		// filtered, both index scans.
		{"ip cidr", Filter{IP: netip.MustParsePrefix("10.0.1.0/24")}, "", true},
		{"ip text", Filter{IPText: "h:hot"}, "hashtextextended(ip", false},
		{"action rare", Filter{Action: "signup"}, "hashtextextended(action", false},
		{"action very rare", Filter{Action: "unlock"}, "hashtextextended(action", false},
		{"action rare cursor", Filter{Action: "signup", Cursor: cursor}, "hashtextextended(action", false},
		{"action common", Filter{Action: "login"}, "", false},
		{"action common cursor", Filter{Action: "login", Cursor: cursor}, "", false},
		{"reason rare", Filter{Reason: "locked_out"}, "reason =", false},
		{"reason rare cursor", Filter{Reason: "rate_limited", Cursor: cursor}, "reason =", false},
		{"reason ok", Filter{Reason: "ok"}, "pkey", false},
		{"decision deny", Filter{Decision: "deny"}, "decision =", false},
		{"decision challenge", Filter{Decision: "challenge"}, "decision =", false},
		{"decision allow", Filter{Decision: "allow"}, "pkey", false},
		{"user and reason", Filter{User: "hot-user", Reason: "ok"}, "", false},
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		if _, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode); err != nil {
			t.Fatal(err)
		}
		for _, tt := range tests {
			t.Run(mode+"/"+tt.name, func(t *testing.T) {
				f, err := checkFilter(tt.f)
				if err != nil {
					t.Fatal(err)
				}
				sql, args := buildQuery(f, f.Limit+1)
				plan := explainPrepared(t, conn.Conn().PgConn(), sql, args)
				checkPlan(t, plan, filled, tt.want, tt.sorted || mode == "force_generic_plan")
			})
		}
		// The overview's series over two minutes of the hour reads them
		// through the primary key. (Over a sixth of the partition, with 1M
		// events, Postgres rightly reads it all sequentially instead.)
		t.Run(mode+"/overview range", func(t *testing.T) {
			plan := explainPrepared(t, conn.Conn().PgConn(), overviewSeriesSQL,
				[]any{now.Add(-20 * time.Minute), now.Add(-18 * time.Minute), 60000})
			checkRangePlan(t, plan, filled)
		})
	}
	// The partial indexes still find what they leave out, and what they hold.
	for _, tt := range []struct {
		f    Filter
		want func(Event) bool
	}{
		{Filter{Reason: "ok", Limit: 50}, func(e Event) bool { return e.Reason == "ok" }},
		{Filter{Reason: "locked_out", Limit: 50}, func(e Event) bool { return e.Reason == "locked_out" }},
		{Filter{Decision: "allow", Limit: 50}, func(e Event) bool { return e.Decision == "allow" }},
		{Filter{Decision: "challenge", Limit: 50}, func(e Event) bool { return e.Decision == "challenge" }},
		{Filter{IPText: "h:hot", Limit: 50}, func(e Event) bool { return e.IP == "h:hot" }},
		{Filter{User: "hot-user", Limit: 50}, func(e Event) bool { return e.User == "hot-user" }},
		{Filter{Action: "unlock", Limit: 50}, func(e Event) bool { return e.Action == "unlock" }},
		{Filter{Action: "login", Limit: 50}, func(e Event) bool { return e.Action == "login" }},
	} {
		page, err := s.Query(ctx, tt.f)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Events) != 50 || page.Next == nil {
			t.Errorf("%+v: got %d events (next %v), want a full page of 50 and a next cursor", tt.f, len(page.Events), page.Next)
		}
		for i, e := range page.Events {
			if !tt.want(e) || (i > 0 && !before(e, &Cursor{At: page.Events[i-1].At, ID: page.Events[i-1].ID})) {
				t.Errorf("%+v: event %d (%s %s) does not match or is out of order", tt.f, i, e.ID, e.At)
				break
			}
		}
	}
}

// planScans returns the scan of each relation in plan (the last one met,
// depth first), calling visit, when not nil, on every node.
func planScans(plan planNode, visit func(planNode)) map[string]planNode {
	scans := map[string]planNode{}
	var walk func(planNode)
	walk = func(n planNode) {
		if visit != nil {
			visit(n)
		}
		if n.Relation != "" {
			scans[n.Relation] = n
		}
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(plan)
	return scans
}

// checkRangePlan asserts that plan reads every filled partition through
// its primary key (an index scan, or a bitmap of it), not sequentially:
// since migration 000004 dropped the BRIN on at, time ranges of the
// overview are the primary key's.
func checkRangePlan(t *testing.T, plan planNode, filled []string) {
	t.Helper()
	scans := planScans(plan, nil)
	for _, rel := range filled {
		n, ok := scans[rel]
		if ok && n.NodeType == "Bitmap Heap Scan" && len(n.Plans) == 1 {
			n = n.Plans[0]
		}
		if !ok || !strings.HasPrefix(n.NodeType, "Index") && n.NodeType != "Bitmap Index Scan" || !strings.HasSuffix(n.Index, "_pkey") {
			t.Errorf("got %s of %s using %q, want a scan of its primary key\n%s", n.NodeType, rel, n.Index, plan)
		}
	}
}

func lpadID(i int) string { return fmt.Sprintf("%026d", i) }

// explainPrepared prepares sql as a named statement and returns the plan
// EXPLAIN EXECUTE gives for args: the plan pgx's prepared statement gets
// under the session's plan_cache_mode. The arguments are the test's own,
// written as SQL literals.
func explainPrepared(t *testing.T, conn *pgconn.PgConn, sql string, args []any) planNode {
	t.Helper()
	ctx := context.Background()
	if _, err := conn.Exec(ctx, "PREPARE plan_q AS "+sql).ReadAll(); err != nil {
		t.Fatalf("prepare %s: %v", sql, err)
	}
	defer func() { _, _ = conn.Exec(ctx, "DEALLOCATE plan_q").ReadAll() }()
	lits := make([]string, len(args))
	for i, a := range args {
		lits[i] = sqlLiteral(t, a)
	}
	res, err := conn.Exec(ctx, "EXPLAIN (FORMAT JSON) EXECUTE plan_q("+strings.Join(lits, ", ")+")").ReadAll()
	if err != nil || len(res) != 1 || len(res[0].Rows) != 1 {
		t.Fatalf("explain %s: %v", sql, err)
	}
	var out []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(res[0].Rows[0][0], &out); err != nil || len(out) != 1 {
		t.Fatalf("explain %s: %v", sql, err)
	}
	return out[0].Plan
}

func sqlLiteral(t *testing.T, v any) string {
	t.Helper()
	quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	switch v := v.(type) {
	case string:
		return quote(v)
	case time.Time:
		return quote(v.Format(time.RFC3339Nano))
	case netip.Addr:
		return quote(v.String())
	case netip.Prefix:
		return quote(v.String())
	case int:
		return strconv.Itoa(v)
	}
	t.Fatalf("no literal for %T", v)
	return ""
}

// planNode is one node of EXPLAIN (FORMAT JSON).
type planNode struct {
	NodeType  string     `json:"Node Type"`
	Relation  string     `json:"Relation Name"`
	Index     string     `json:"Index Name"`
	IndexCond string     `json:"Index Cond"`
	Plans     []planNode `json:"Plans"`
}

func (n planNode) String() string {
	var b strings.Builder
	var walk func(planNode, int)
	walk = func(n planNode, depth int) {
		fmt.Fprintf(&b, "%s%s %s %s %s\n", strings.Repeat("  ", depth), n.NodeType, n.Relation, n.Index, n.IndexCond)
		for _, c := range n.Plans {
			walk(c, depth+1)
		}
	}
	walk(n, 0)
	return b.String()
}

// checkPlan asserts that plan is a Limit over index scans of every filled
// partition whose Index Cond holds want (or whose index is the primary
// key, for want "pkey"), with no Sort unless sorted, and no sequential or
// bitmap scan of a filled partition unless sorted (a CIDR range may be
// read through a bitmap of its index and then sorted).
func checkPlan(t *testing.T, plan planNode, filled []string, want string, sorted bool) {
	t.Helper()
	if plan.NodeType != "Limit" {
		t.Errorf("got top node %s, want Limit\n%s", plan.NodeType, plan)
	}
	scans := planScans(plan, func(n planNode) {
		if n.NodeType == "Sort" && !sorted {
			t.Errorf("got a Sort of the matching rows, want them read in order\n%s", plan)
		}
	})
	for _, rel := range filled {
		n, ok := scans[rel]
		if !ok {
			t.Errorf("no scan of %s\n%s", rel, plan)
			continue
		}
		if n.NodeType == "Bitmap Heap Scan" && sorted && len(n.Plans) == 1 {
			n = n.Plans[0]
		}
		switch {
		case n.NodeType != "Index Scan" && n.NodeType != "Index Only Scan" && n.NodeType != "Bitmap Index Scan":
			t.Errorf("got %s of %s, want an index scan\n%s", n.NodeType, rel, plan)
		case n.NodeType == "Bitmap Index Scan" && !sorted:
			t.Errorf("got a bitmap scan of %s, want an index scan in order\n%s", rel, plan)
		case want == "pkey" && !strings.HasSuffix(n.Index, "_pkey"):
			t.Errorf("got a scan of %s using %s, want the primary key\n%s", rel, n.Index, plan)
		case want != "pkey" && !strings.Contains(n.IndexCond, want):
			t.Errorf("got a scan of %s on %q, want an index condition on %q\n%s", rel, n.IndexCond, want, plan)
		}
	}
}
