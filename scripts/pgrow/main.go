// Command pgrow measures Postgres's CPU per audit row for sets of indexes
// (docs/performance.md, "Postgres CPU per audit row"); scripts/pgrow.sh
// runs it against a private cluster. Each run of a variant starts from a
// fresh audit_events (one daily partition and the default one), then
// writes -rows events shaped like scripts/bench.sh's decisions (a random
// user, address and device each, action login, allow / ok) through
// audit.PGStore.InsertFresh in batches of -batch (1000) on -conns (1)
// connections at once: the audit writer's binary COPY (its MaxInFlight is
// 2, which -conns 2 reproduces). CPU is utime+stime from /proc of every
// process of the cluster (the postmaster, its live children and, through
// its cutime/cstime, the children that exited meanwhile), read before and
// 1.5 s after the last batch so the WAL writer and autovacuum are counted;
// "backend" is the COPY's own backend alone. Variants run interleaved, -reps
// times, and the summary gives medians and the ratios against "pk" (a
// table with the primary key only) and "schema3" of the same rep. -pids
// prints the backends' pids, for scripts/pgrow-ir.sh.
//
//	go run ./scripts/pgrow -db postgres://postgres@127.0.0.1:5498/pgrow -pidfile DIR/postmaster.pid
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/migrations"
)

// table is audit_events as migrations 000001 and 000002 leave it, without
// any index (%s: the primary key, or nothing).
const table = `DROP TABLE IF EXISTS audit_events CASCADE;
CREATE TABLE audit_events (
    at timestamptz NOT NULL, id text COLLATE "C" NOT NULL, kind text NOT NULL,
    action text, decision text, reason text, outcome text, user_id text,
    ip text, ip_addr inet, device text, rule text, retry_after_ms bigint,
    lockout_until timestamptz, degraded boolean, dry_run boolean, api_key text,
    decision_id text, instance text, note text, phone text %s
) PARTITION BY RANGE (at);
CREATE TABLE audit_events_default PARTITION OF audit_events DEFAULT;
`

const partition = `CREATE TABLE audit_events_day PARTITION OF audit_events
    FOR VALUES FROM ('2030-01-01') TO ('2030-01-02')`

// variants are the primary key plus one index each, named after the
// migration that has (v2) or would have (v3) it; "schema2" and "schema3"
// are the migrations themselves, up to 000002 and 000003.
var variants = map[string][]string{
	"heap":           nil,
	"pk":             {},
	"brin":           {"USING brin (at)"},
	"user_v2":        {"(user_id, at DESC, id DESC)"},
	"user_v3":        {"(hashtextextended(user_id, 0), at) WHERE user_id IS NOT NULL"},
	"user_collate_c": {`(user_id COLLATE "C", at DESC, id DESC)`},
	"user_text_at":   {`(user_id, at)`},
	"user_hash_id":   {"(hashtextextended(user_id, 0), at, id) WHERE user_id IS NOT NULL"},
	"ip_v2":          {"(ip_addr, at DESC, id DESC)"},
	"ip_v3":          {"(ip_addr, at) WHERE ip_addr IS NOT NULL"},
	"ip_text_v3":     {"(hashtextextended(ip, 0), at) WHERE ip_addr IS NULL AND ip IS NOT NULL"},
	"device_v2":      {"(device, at DESC, id DESC)"},
	"device_v3":      {"(hashtextextended(device, 0), at) WHERE device IS NOT NULL"},
	"action_v2":      {"(action, at DESC, id DESC)"},
	"action_v3":      {"(action, at, id)"},
	"reason_v2":      {"(reason, at DESC, id DESC)"},
	"reason_asc":     {"(reason, at, id)"},
	"reason_v3":      {"(reason, at, id) WHERE reason <> 'ok'"},
	"decision_v3":    {"(decision, at, id) WHERE decision <> 'allow'"},
	"phone_v2":       {"(phone, at DESC, id DESC) WHERE phone IS NOT NULL"},
	// Candidates after 000003 (docs/performance.md, "Postgres CPU per
	// audit row", the second round).
	"action_at":    {"(action, at)"},
	"action_plain": {"(action)"},
	"ip_plain":     {"(ip_addr) WHERE ip_addr IS NOT NULL"},
	"ip_nodedup":   {"(ip_addr, at) WITH (deduplicate_items = off) WHERE ip_addr IS NOT NULL"},
	"ip_gist":      {"USING gist (ip_addr inet_ops) WHERE ip_addr IS NOT NULL"},
	"user_nodedup": {"(hashtextextended(user_id, 0), at) WITH (deduplicate_items = off) WHERE user_id IS NOT NULL"},
	"brin_32":      {"USING brin (at) WITH (pages_per_range = 32)"},
	"ip_v4int":     {"((ip_addr - '0.0.0.0'::inet), at) WHERE family(ip_addr) = 4"},
	"ip_send":      {"(inet_send(ip_addr), at) WHERE ip_addr IS NOT NULL"},
	"ip_hash":      {"(hashinetextended(ip_addr, 0), at) WHERE ip_addr IS NOT NULL"},
	"action_hash":  {"(hashtextextended(action, 0), at) WHERE action IS NOT NULL"},
	"schema2":      nil, // migrations up to 000002
	"schema3":      nil, // migrations up to 000003
	"schema4":      nil, // migrations up to 000004
}

// after3 are variants of the whole schema of 000003: its migrations, then
// these statements.
var after3 = map[string]string{
	"s3_action_at": `DROP INDEX audit_events_action_idx;
CREATE INDEX audit_events_action_idx ON audit_events (action, at);`,
	"s3_action_plain": `DROP INDEX audit_events_action_idx;
CREATE INDEX audit_events_action_idx ON audit_events (action);`,
	"s3_noaction": `DROP INDEX audit_events_action_idx;`,
	"s3_nobrin":   `DROP INDEX audit_events_at_brin;`,
	"s3_nodedup": `DROP INDEX audit_events_user_idx, audit_events_device_idx, audit_events_ip_idx;
CREATE INDEX audit_events_user_idx ON audit_events (hashtextextended(user_id, 0), at)
    WITH (deduplicate_items = off) WHERE user_id IS NOT NULL;
CREATE INDEX audit_events_device_idx ON audit_events (hashtextextended(device, 0), at)
    WITH (deduplicate_items = off) WHERE device IS NOT NULL;
CREATE INDEX audit_events_ip_idx ON audit_events (ip_addr, at)
    WITH (deduplicate_items = off) WHERE ip_addr IS NOT NULL;`,
	"s3_action_hash": `DROP INDEX audit_events_action_idx;
CREATE INDEX audit_events_action_idx ON audit_events (hashtextextended(action, 0), at)
    WHERE action IS NOT NULL;`,
	"s3_ip_v4int": `DROP INDEX audit_events_ip_idx;
CREATE INDEX audit_events_ip4_idx ON audit_events ((ip_addr - '0.0.0.0'::inet), at) WHERE family(ip_addr) = 4;
CREATE INDEX audit_events_ip6_idx ON audit_events (ip_addr, at) WHERE family(ip_addr) = 6;`,
	"s3_lean_ip4": `DROP INDEX audit_events_action_idx;
CREATE INDEX audit_events_action_idx ON audit_events (action, at);
DROP INDEX audit_events_at_brin;
DROP INDEX audit_events_ip_idx;
CREATE INDEX audit_events_ip4_idx ON audit_events ((ip_addr - '0.0.0.0'::inet), at) WHERE family(ip_addr) = 4;
CREATE INDEX audit_events_ip6_idx ON audit_events (ip_addr, at) WHERE family(ip_addr) = 6;`,
	"s3_hash_nobrin": `DROP INDEX audit_events_action_idx, audit_events_at_brin;
CREATE INDEX audit_events_action_idx ON audit_events (hashtextextended(action, 0), at)
    WHERE action IS NOT NULL;`,
	"s3_ip_plain": `DROP INDEX audit_events_ip_idx;
CREATE INDEX audit_events_ip_idx ON audit_events (ip_addr) WHERE ip_addr IS NOT NULL;`,
	// 000004 (action hashed, BRIN on at dropped) with the action's b-tree
	// replaced by a bloom BRIN, or by nothing (docs/performance.md, "third
	// round").
	"s4_action_bloom": `DROP INDEX audit_events_action_idx, audit_events_at_brin;
CREATE INDEX audit_events_action_bloom ON audit_events USING brin (action text_bloom_ops);`,
	"s4_noaction": `DROP INDEX audit_events_action_idx, audit_events_at_brin;`,
	"s3_lean": `DROP INDEX audit_events_action_idx;
CREATE INDEX audit_events_action_idx ON audit_events (action, at);
DROP INDEX audit_events_at_brin;`,
}

func init() {
	for n := range after3 {
		variants[n] = nil
	}
}

func main() {
	url := flag.String("db", "postgres://postgres@127.0.0.1:5498/pgrow?sslmode=disable", "database URL")
	pidfile := flag.String("pidfile", "", "the cluster's postmaster.pid")
	rows := flag.Int("rows", 200000, "events written and measured per run")
	preload := flag.Int("preload", 0, "events written (and vacuumed) before the measured ones")
	reps := flag.Int("reps", 3, "runs of every variant")
	list := flag.String("v", "pk,schema2,schema3", "comma-separated variants")
	conns := flag.Int("conns", 1, "batches written at once, each on its own connection (the writer's MaxInFlight is 2)")
	batchSize := flag.Int("batch", 1000, "events per COPY")
	printPIDs := flag.Bool("pids", false, "print the COPY backends' pids on stderr (for profiling them)")
	flag.Parse()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(*url)
	check(err)
	cfg.MaxConns = int32(*conns)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	check(err)
	defer pool.Close()
	store := audit.NewPGStore(slog.New(slog.NewTextHandler(io.Discard, nil)), pool, audit.PGConfig{})
	pm := postmasterPID(*pidfile)
	names := strings.Split(*list, ",")
	for _, n := range names {
		if _, ok := variants[n]; !ok {
			log.Fatalf("unknown variant %q", n)
		}
	}
	fmt.Printf("%-15s %4s %10s %10s %9s\n", "variant", "run", "us/row", "backend", "rows/s")
	total, backend := map[string][]float64{}, map[string][]float64{}
	for r := range *reps {
		for _, name := range names {
			check(createSchema(ctx, pool, name))
			rng := rand.New(rand.NewPCG(uint64(r), 7))
			seq := 0
			load := func(n int) {
				// Batches are made in order (times ascending) and written
				// by -conns goroutines at once, as the writer's batches in
				// flight are.
				batches := make(chan []audit.Event, *conns)
				errs := make(chan error, *conns)
				for range *conns {
					go func() {
						var err error
						for b := range batches {
							if err == nil {
								err = store.InsertFresh(ctx, b)
							}
						}
						errs <- err
					}()
				}
				for done := 0; done < n; done += *batchSize {
					batches <- batch(rng, &seq, min(*batchSize, n-done))
				}
				close(batches)
				for range *conns {
					check(<-errs)
				}
			}
			if *preload > 0 {
				load(*preload)
				_, err := pool.Exec(ctx, "VACUUM ANALYZE audit_events")
				check(err)
			}
			_, err := pool.Exec(ctx, "CHECKPOINT")
			check(err)
			bpids := backendPIDs(ctx, pool, *conns)
			if *printPIDs {
				fmt.Fprintln(os.Stderr, "backend pids:", strings.Trim(fmt.Sprint(bpids), "[]"))
			}
			time.Sleep(300 * time.Millisecond)
			t0, b0 := clusterTicks(pm), backendTicks(bpids)
			start := time.Now()
			load(*rows)
			elapsed := time.Since(start)
			b1 := backendTicks(bpids)
			time.Sleep(1500 * time.Millisecond)
			t1 := clusterTicks(pm)
			perRow := func(t int64) float64 { return float64(t) * 1e6 / clockTicks / float64(*rows) }
			total[name] = append(total[name], perRow(t1-t0))
			backend[name] = append(backend[name], perRow(b1-b0))
			fmt.Printf("%-15s %4d %10.2f %10.2f %9.0f\n", name, r, perRow(t1-t0), perRow(b1-b0),
				float64(*rows)/elapsed.Seconds())
		}
	}
	// The ratios are medians of each run's ratio to the reference's run of
	// the same rep (written just before or after it), which cancels more of
	// a shared machine's drift than a ratio of medians.
	ratio := func(name, ref string) string {
		if len(total[ref]) == 0 {
			return "-"
		}
		var r []float64
		for i, v := range total[name] {
			r = append(r, v/total[ref][i])
		}
		return fmt.Sprintf("%.3f", median(r))
	}
	fmt.Printf("\n%-15s %10s %10s %8s %10s  %s\n", "median", "us/row", "backend", "x pk", "x schema3", "every run (us/row)")
	for _, name := range names {
		var all []string
		for _, v := range total[name] {
			all = append(all, fmt.Sprintf("%.2f", v))
		}
		fmt.Printf("%-15s %10.2f %10.2f %8s %10s  %s\n", name, median(total[name]), median(backend[name]),
			ratio(name, "pk"), ratio(name, "schema3"), strings.Join(all, " "))
	}
}

// backendPIDs opens the pool's n connections and returns their backends'
// pids.
func backendPIDs(ctx context.Context, pool *pgxpool.Pool, n int) []int {
	var pids []int
	for range n {
		c, err := pool.Acquire(ctx)
		check(err)
		defer c.Release()
		var pid int
		check(c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
		pids = append(pids, pid)
	}
	return pids
}

func backendTicks(pids []int) int64 {
	var t int64
	for _, p := range pids {
		t += ticks(p, false)
	}
	return t
}

// createSchema makes a fresh audit_events for variant name.
func createSchema(ctx context.Context, pool *pgxpool.Pool, name string) error {
	var sql string
	switch name {
	case "heap":
		sql = fmt.Sprintf(table, "")
	case "schema2", "schema3", "schema4":
		sql = schemaUpTo(name)
	default:
		if extra, ok := after3[name]; ok {
			sql = schemaUpTo("schema3") + extra + "\n"
			break
		}
		sql = fmt.Sprintf(table, ", PRIMARY KEY (at, id)")
		for _, idx := range variants[name] {
			sql += "CREATE INDEX ON audit_events " + idx + ";\n"
		}
	}
	_, err := pool.Exec(ctx, sql+partition)
	return err
}

// schemaUpTo is the SQL of the migrations up to "schema2" (000002),
// "schema3" (000003) or "schema4" (000004), after dropping audit_events.
func schemaUpTo(name string) string {
	sql := "DROP TABLE IF EXISTS audit_events CASCADE;\n"
	last := map[string]string{"schema2": "000002", "schema3": "000003", "schema4": "000004"}[name]
	files, err := fs.Glob(migrations.FS, "*.up.sql")
	check(err)
	slices.Sort(files)
	for _, f := range files {
		if f[:6] > last {
			break
		}
		b, err := fs.ReadFile(migrations.FS, f)
		check(err)
		sql += string(b) + "\n"
	}
	return sql
}

// batch returns n check events of the bench's shape, 66 µs apart (about
// 15k events/s) from 2030-01-01T01:00Z.
func batch(rng *rand.Rand, seq *int, n int) []audit.Event {
	base := time.Date(2030, 1, 1, 1, 0, 0, 0, time.UTC)
	evs := make([]audit.Event, n)
	no, zero := false, int64(0)
	for i := range evs {
		*seq++
		at := base.Add(time.Duration(*seq) * 66 * time.Microsecond)
		k := rng.IntN(1000000) + 1
		id := ulid.MustNew(ulid.Timestamp(at), ulid.DefaultEntropy()).String()
		evs[i] = audit.Event{
			ID: id, At: at, Kind: audit.KindCheck, Action: "login", Decision: "allow", Reason: "ok",
			User: fmt.Sprintf("u%d@example.com", k), IP: fmt.Sprintf("198.%d.%d.%d", 18+k%2, (k/256)%256, k%256),
			Device: fmt.Sprintf("d-%d", k), Rule: "login/ip", RetryAfterMs: &zero, Degraded: &no, DryRun: &no,
			APIKey: "bench", DecisionID: id, Instance: "bench-host",
		}
	}
	return evs
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times (100 on Linux).
const clockTicks = 100

func postmasterPID(pidfile string) int {
	b, err := os.ReadFile(pidfile)
	check(err)
	n, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	check(err)
	return n
}

// stat returns the fields of /proc/PID/stat after the command name (field
// 3, the state, is [0]), or nil when the process is gone.
func stat(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
}

// ticks is pid's utime+stime, plus cutime+cstime (its reaped children)
// with children.
func ticks(pid int, children bool) int64 {
	f := stat(pid)
	if f == nil {
		return 0
	}
	idx := []int{11, 12} // utime, stime: fields 14 and 15
	if children {
		idx = append(idx, 13, 14)
	}
	var t int64
	for _, i := range idx {
		v, _ := strconv.ParseInt(f[i], 10, 64)
		t += v
	}
	return t
}

// clusterTicks is the CPU of the postmaster, its reaped children and its
// live children.
func clusterTicks(pm int) int64 {
	t := ticks(pm, true)
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		if f := stat(pid); f != nil && f[1] == strconv.Itoa(pm) {
			t += ticks(pid, false)
		}
	}
	return t
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
