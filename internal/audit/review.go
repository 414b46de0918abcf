package audit

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// The review pages' queries: pages towards newer events (a "previous"
// link), bounded counts, and the overview's aggregates. Both stores
// implement them with the same results; the shared tests hold them to it.

// QueryNewer returns the page of matching events just newer than
// f.Cursor (required): the f.Limit events closest to it, newest first.
// Page.Next is then the cursor of the newest of them when still newer
// events match (the next page in that direction), nil otherwise; a Query
// with the cursor of the oldest event returned continues the other way.
func (s *PGStore) QueryNewer(ctx context.Context, f Filter) (Page, error) {
	f, err := checkNewer(f)
	if err != nil {
		return Page{}, err
	}
	where, args := buildWhere(f)
	args = append(args, f.Cursor.At, f.Cursor.ID)
	where = append(where, fmt.Sprintf("(at, id) > ($%d, $%d)", len(args)-1, len(args)))
	args = append(args, f.Limit+1)
	sql := "SELECT " + selectColumns + " FROM audit_events WHERE " + strings.Join(where, " AND ") +
		fmt.Sprintf(" ORDER BY at ASC, id ASC LIMIT $%d", len(args))
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return Page{}, fmt.Errorf("audit query newer: %w", err)
	}
	defer rows.Close()
	var asc []Event
	for rows.Next() {
		e, err := scanEvent(rows)
		if err != nil {
			return Page{}, fmt.Errorf("audit query newer: scan: %w", err)
		}
		asc = append(asc, e)
	}
	if err := rows.Err(); err != nil {
		return Page{}, fmt.Errorf("audit query newer: %w", err)
	}
	return newerPage(asc, f.Limit), nil
}

// Count returns how many events match f (its cursor and limit ignored),
// counting at most max (so a count over a huge trail stays cheap): a
// result equal to max means "max or more".
func (s *PGStore) Count(ctx context.Context, f Filter, max int) (int, error) {
	f.Cursor, f.Limit = nil, 0
	f, err := checkFilter(f)
	if err != nil {
		return 0, err
	}
	where, args := buildWhere(f)
	sql := "SELECT 1 FROM audit_events"
	if len(where) > 0 {
		sql += " WHERE " + strings.Join(where, " AND ")
	}
	args = append(args, max)
	sql = fmt.Sprintf("SELECT count(*) FROM (%s LIMIT $%d) AS t", sql, len(args))
	var n int
	if err := s.pool.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("audit count: %w", err)
	}
	return n, nil
}

// overviewSeriesSQL counts the check events of [$1, $2) per bucket of $3
// milliseconds by decision and reason. The time range is read through the
// primary key (at, id) (TestQueryPlansUseIndexes), or sequentially when it
// is most of a partition.
const overviewSeriesSQL = `SELECT floor(extract(epoch FROM at - $1::timestamptz) * 1000 / $3)::bigint AS b,
	coalesce(decision, ''), coalesce(reason, ''), count(*)
	FROM audit_events WHERE kind = 'check' AND at >= $1 AND at < $2
	GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`

// Overview aggregates the check events of [q.Since, q.Until): counts per
// bucket of q.Bucket by decision and reason, and the identifiers most often
// denied.
func (s *PGStore) Overview(ctx context.Context, q OverviewQuery) (Overview, error) {
	q, err := q.check()
	if err != nil {
		return Overview{}, err
	}
	out := Overview{Since: q.Since, Until: q.Until, Bucket: q.Bucket}
	rows, err := s.pool.Query(ctx, overviewSeriesSQL, q.Since, q.Until, q.Bucket.Milliseconds())
	if err != nil {
		return Overview{}, fmt.Errorf("audit overview: %w", err)
	}
	for rows.Next() {
		var b int64
		var c SeriesCount
		if err := rows.Scan(&b, &c.Decision, &c.Reason, &c.Count); err != nil {
			rows.Close()
			return Overview{}, fmt.Errorf("audit overview: scan: %w", err)
		}
		c.Start = q.Since.Add(time.Duration(b) * q.Bucket)
		out.Series = append(out.Series, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return Overview{}, fmt.Errorf("audit overview: %w", err)
	}
	for _, t := range []struct {
		col string
		dst *[]TopCount
	}{{"ip", &out.TopIPs}, {"user_id", &out.TopUsers}, {"device", &out.TopDevices}, {"phone", &out.TopPhones}} {
		rows, err := s.pool.Query(ctx, `SELECT `+t.col+`, count(*) FROM audit_events
			WHERE kind = 'check' AND decision = 'deny' AND at >= $1 AND at < $2 AND `+t.col+` IS NOT NULL
			GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT $3`, q.Since, q.Until, q.Top)
		if err != nil {
			return Overview{}, fmt.Errorf("audit overview top %s: %w", t.col, err)
		}
		for rows.Next() {
			var c TopCount
			if err := rows.Scan(&c.Value, &c.Count); err != nil {
				rows.Close()
				return Overview{}, fmt.Errorf("audit overview top %s: scan: %w", t.col, err)
			}
			*t.dst = append(*t.dst, c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return Overview{}, fmt.Errorf("audit overview top %s: %w", t.col, err)
		}
	}
	return out, nil
}

// QueryNewer is PGStore.QueryNewer over the memory store.
func (s *MemoryStore) QueryNewer(_ context.Context, f Filter) (Page, error) {
	f, err := checkNewer(f)
	if err != nil {
		return Page{}, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	c := *f.Cursor
	start := sort.Search(s.n, func(j int) bool { return !before(*s.at(j), &c) && !s.at(j).sameKey(c) })
	var asc []Event
	for i := start; i < s.n && len(asc) <= f.Limit; i++ {
		e := *s.at(i)
		if !f.Until.IsZero() && !e.At.Before(f.Until) {
			break
		}
		if matches(f, e) {
			asc = append(asc, e)
		}
	}
	return newerPage(asc, f.Limit), nil
}

// Count is PGStore.Count over the memory store.
func (s *MemoryStore) Count(_ context.Context, f Filter, max int) (int, error) {
	f.Cursor, f.Limit = nil, 0
	f, err := checkFilter(f)
	if err != nil {
		return 0, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := 0
	for i := s.n - 1; i >= 0 && n < max; i-- {
		e := s.at(i)
		if !f.Since.IsZero() && e.At.Before(f.Since) {
			break
		}
		if matches(f, *e) {
			n++
		}
	}
	return n, nil
}

// Overview is PGStore.Overview over the memory store.
func (s *MemoryStore) Overview(_ context.Context, q OverviewQuery) (Overview, error) {
	q, err := q.check()
	if err != nil {
		return Overview{}, err
	}
	out := Overview{Since: q.Since, Until: q.Until, Bucket: q.Bucket}
	type key struct {
		b                int64
		decision, reason string
	}
	series := map[key]int64{}
	tops := [4]map[string]int64{{}, {}, {}, {}}
	s.mu.RLock()
	for i := s.n - 1; i >= 0; i-- {
		e := s.at(i)
		if e.At.Before(q.Since) {
			break
		}
		if e.Kind != KindCheck || !e.At.Before(q.Until) {
			continue
		}
		b := int64(e.At.Sub(q.Since) / q.Bucket)
		series[key{b, e.Decision, e.Reason}]++
		if e.Decision == "deny" {
			for j, v := range []string{e.IP, e.User, e.Device, e.Phone} {
				if v != "" {
					tops[j][v]++
				}
			}
		}
	}
	s.mu.RUnlock()
	for k, n := range series {
		out.Series = append(out.Series, SeriesCount{Start: q.Since.Add(time.Duration(k.b) * q.Bucket), Decision: k.decision, Reason: k.reason, Count: n})
	}
	slices.SortFunc(out.Series, func(a, b SeriesCount) int {
		return cmp.Or(a.Start.Compare(b.Start), strings.Compare(a.Decision, b.Decision), strings.Compare(a.Reason, b.Reason))
	})
	for j, dst := range []*[]TopCount{&out.TopIPs, &out.TopUsers, &out.TopDevices, &out.TopPhones} {
		for v, n := range tops[j] {
			*dst = append(*dst, TopCount{Value: v, Count: n})
		}
		slices.SortFunc(*dst, func(a, b TopCount) int {
			return cmp.Or(cmp.Compare(b.Count, a.Count), strings.Compare(a.Value, b.Value))
		})
		if len(*dst) > q.Top {
			*dst = (*dst)[:q.Top]
		}
	}
	return out, nil
}

// OverviewQuery selects the overview's window.
type OverviewQuery struct {
	// Since (inclusive) and Until (exclusive) bound the window; required,
	// Since before Until, at most MaxOverviewBuckets buckets apart.
	Since, Until time.Time
	// Bucket is the series' step; default one minute, at least a second.
	Bucket time.Duration
	// Top is how many identifiers each top list holds; default 10, at
	// most 100.
	Top int
}

// MaxOverviewBuckets bounds the series of one overview.
const MaxOverviewBuckets = 10000

func (q OverviewQuery) check() (OverviewQuery, error) {
	if q.Bucket == 0 {
		q.Bucket = time.Minute
	}
	if q.Top == 0 {
		q.Top = 10
	}
	q.Since, q.Until = ceilMillis(q.Since).UTC(), ceilMillis(q.Until).UTC()
	switch {
	case q.Bucket < time.Second:
		return q, fmt.Errorf("%w: overview bucket %v under 1s", ErrBadFilter, q.Bucket)
	case q.Top < 1 || q.Top > 100:
		return q, fmt.Errorf("%w: overview top %d outside 1..100", ErrBadFilter, q.Top)
	case q.Since.IsZero() || !q.Since.Before(q.Until):
		return q, fmt.Errorf("%w: overview window must have since before until", ErrBadFilter)
	case q.Until.Sub(q.Since)/q.Bucket > MaxOverviewBuckets:
		return q, fmt.Errorf("%w: overview of more than %d buckets", ErrBadFilter, MaxOverviewBuckets)
	}
	return q, nil
}

// Overview is what the review pages' overview shows.
type Overview struct {
	Since, Until time.Time
	Bucket       time.Duration
	// Series holds the non-zero counts of check events per bucket,
	// decision and reason, by bucket start, then decision, then reason.
	Series []SeriesCount
	// TopIPs, TopUsers and TopDevices are the identifiers of the most
	// denied checks, most first (ties by value).
	TopIPs, TopUsers, TopDevices []TopCount
	// TopPhones are the phone numbers of the most denied checks (SMS
	// pumping shows as many numbers of one prefix here).
	TopPhones []TopCount
}

// SeriesCount is one bucket's count of one decision and reason.
type SeriesCount struct {
	Start            time.Time
	Decision, Reason string
	Count            int64
}

// TopCount is how often one identifier was denied.
type TopCount struct {
	Value string
	Count int64
}

// checkNewer validates a QueryNewer filter.
func checkNewer(f Filter) (Filter, error) {
	if f.Cursor == nil {
		return f, fmt.Errorf("%w: a cursor is required to page towards newer events", ErrBadFilter)
	}
	return checkFilter(f)
}

// newerPage turns up to limit+1 events ascending from a cursor into a page
// newest first whose Next points further towards newer events.
func newerPage(asc []Event, limit int) Page {
	var p Page
	if len(asc) > limit {
		asc = asc[:limit]
		newest := asc[len(asc)-1]
		p.Next = &Cursor{At: newest.At, ID: newest.ID}
	}
	slices.Reverse(asc)
	p.Events = asc
	return p
}

// sameKey reports whether e is at the cursor position itself.
func (e *Event) sameKey(c Cursor) bool { return e.At.Equal(c.At) && e.ID == c.ID }
