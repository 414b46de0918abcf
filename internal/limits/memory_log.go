package limits

// memEntry is n log entries stamped ts (unix ms). A cost-c attempt, or
// several attempts in one millisecond, share one memEntry.
type memEntry struct {
	ts int64
	n  int
}

// memLog is one sliding-window log: a deque of entries in ascending ts
// order, entries[head:] live. Trimming advances head; a full slice whose
// front half is dead is compacted instead of grown, so its capacity stays
// within about twice the number of distinct milliseconds in one window.
type memLog struct {
	entries []memEntry
	head    int
	count   int   // sum of n over live entries
	expires int64 // when the newest entry leaves the longest window seen
}

// trim drops the entries that no longer count at now for any window up
// to keep (ms): those with ts <= now-keep. A log that rules with several
// windows share (Rule.Keep) is trimmed to the longest of them; each rule
// counts its own window with span.
func (l *memLog) trim(now, keep int64) {
	for l.head < len(l.entries) && l.entries[l.head].ts <= now-keep {
		l.count -= l.entries[l.head].n
		l.head++
	}
	if l.head == len(l.entries) {
		l.entries = l.entries[:0]
		l.head = 0
	}
}

// add appends n entries stamped now and returns their stamp; the log lives
// for keep (ms) after it. A clock that stepped back is clamped to the
// newest entry, which keeps the deque sorted and only ever makes the log
// stricter.
func (l *memLog) add(now, keep int64, n int) int64 {
	last := len(l.entries) - 1
	switch {
	case last >= l.head && l.entries[last].ts >= now:
		l.entries[last].n += n
		now = l.entries[last].ts
	default:
		// Compact only when at least half the slice is dead, so each
		// copied entry pays for many appends.
		if len(l.entries) == cap(l.entries) && l.head > 0 && l.head >= len(l.entries)/2 {
			k := copy(l.entries, l.entries[l.head:])
			l.entries = l.entries[:k]
			l.head = 0
		}
		l.entries = append(l.entries, memEntry{ts: now, n: n})
	}
	l.count += n
	l.expires = max(l.expires, now+keep)
	return now
}

// keepNewest drops the oldest entries until at most n are left (a log of
// passed challenges; see Rule.Passed).
func (l *memLog) keepNewest(n int) {
	for l.count > n && l.head < len(l.entries) {
		e := &l.entries[l.head]
		if drop := l.count - n; drop < e.n {
			e.n -= drop
			l.count = n
			return
		}
		l.count -= e.n
		l.head++
	}
}

// remove takes back one entry stamped ts, if the log still holds one
// (entries of one stamp are interchangeable).
func (l *memLog) remove(ts int64) {
	for i := l.head; i < len(l.entries); i++ {
		if l.entries[i].ts != ts {
			continue
		}
		l.count--
		if l.entries[i].n--; l.entries[i].n == 0 {
			l.entries = append(l.entries[:i], l.entries[i+1:]...)
		}
		return
	}
}

// span returns where window w (ms) at now starts in the live entries (the
// first with ts > now-w) and how many entries lie in it. A nil log is empty.
func (l *memLog) span(now, w int64) (from, count int) {
	if l == nil {
		return 0, 0
	}
	from, count = l.head, l.count
	for from < len(l.entries) && l.entries[from].ts <= now-w {
		count -= l.entries[from].n
		from++
	}
	return from, count
}

// nth returns the ts of the k-th oldest entry from index from (from 1);
// k is at most the number of entries from there.
func (l *memLog) nth(from, k int) int64 {
	for _, e := range l.entries[from:] {
		k -= e.n
		if k <= 0 {
			return e.ts
		}
	}
	return l.entries[len(l.entries)-1].ts
}

// retryAfter is the time (ms) from now until enough entries have left
// window w for cost to fit under limit. A cost above the limit never fits;
// it gets the time until the window is empty, at least 1ms. A nil log is
// empty.
func (l *memLog) retryAfter(now, w int64, limit, cost int) int64 {
	from, count := l.span(now, w)
	k := count + cost - limit
	switch {
	case k <= 0:
		return 0
	case k <= count:
		return l.nth(from, k) + w - now
	case count > 0:
		return l.entries[len(l.entries)-1].ts + w - now
	default:
		return max(w, 1)
	}
}
