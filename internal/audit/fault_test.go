package audit

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/guardhq/guard/internal/testenv"
)

const pgBin = "/usr/lib/postgresql/15/bin"

// privatePostgres is a Postgres server this test starts, stops and starts
// again on a free port in its own directory — never the shared one.
type privatePostgres struct {
	t    *testing.T
	dir  string
	port int
}

func startPrivatePostgres(t *testing.T) *privatePostgres {
	t.Helper()
	if _, err := os.Stat(filepath.Join(pgBin, "pg_ctl")); err != nil {
		testenv.Missing(t, "private postgres unavailable: %v", err)
	}
	if _, err := exec.LookPath("runuser"); err != nil || os.Geteuid() != 0 {
		testenv.Missing(t, "private postgres unavailable: needs root and runuser to run postgres as the postgres user")
	}
	pgUser, err := user.Lookup("postgres")
	if err != nil {
		testenv.Missing(t, "private postgres unavailable: no postgres OS user: %v", err)
	}
	uid, _ := strconv.Atoi(pgUser.Uid)
	gid, _ := strconv.Atoi(pgUser.Gid)
	dir, err := os.MkdirTemp("", "guard-audit-pg-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	p := &privatePostgres{t: t, dir: dir, port: port}
	p.run("initdb", "-D", p.data(), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8")
	t.Cleanup(func() {
		exec.Command("runuser", "-u", "postgres", "--", filepath.Join(pgBin, "pg_ctl"),
			"-D", p.data(), "-m", "immediate", "-w", "stop").Run()
		os.RemoveAll(dir)
	})
	p.start()
	return p
}

func (p *privatePostgres) data() string { return filepath.Join(p.dir, "data") }

func (p *privatePostgres) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", p.port)
}

func (p *privatePostgres) run(bin string, args ...string) {
	p.t.Helper()
	cmd := exec.Command("runuser", append([]string{"-u", "postgres", "--", filepath.Join(pgBin, bin)}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		p.t.Fatalf("%s: %v\n%s", bin, err, out)
	}
}

func (p *privatePostgres) start() {
	p.t.Helper()
	p.run("pg_ctl", "-D", p.data(), "-l", filepath.Join(p.dir, "log"), "-w", "-o",
		fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off", p.port, p.dir), "start")
}

func (p *privatePostgres) stop() {
	p.t.Helper()
	p.run("pg_ctl", "-D", p.data(), "-m", "fast", "-w", "stop")
}

// Postgres goes away while Guard keeps deciding and comes back: every
// decision ends up in the table exactly once.
func TestWriterSurvivesPostgresOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a private postgres")
	}
	pg := startPrivatePostgres(t)
	ctx := context.Background()
	if _, _, err := Migrate(ctx, pg.url(), MigrateUp); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	pool, err := pgxpool.New(ctx, pg.url())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store := NewPGStore(discardLogger(), pool, PGConfig{})
	if _, err := store.Maintain(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(discardLogger(), WriterConfig{BatchSize: 50, FlushInterval: 20 * time.Millisecond,
		RetryInterval: 50 * time.Millisecond, InsertTimeout: 2 * time.Second, SpoolDir: t.TempDir()},
		store, WriterHooks{})
	if err != nil {
		t.Fatal(err)
	}
	evs := genEvents("pg", 800, time.Now().UTC().Add(-time.Minute), time.Millisecond)
	record := func(from, to int) {
		for i := from; i < to; i++ {
			w.Record(evs[i])
			if i%50 == 0 {
				time.Sleep(time.Millisecond) // decisions arrive over time, not in one burst
			}
		}
	}

	record(0, 200)
	waitFor(t, "first events written", func() bool { return w.Backlog() == 0 && w.Stats().Written == 200 })

	pg.stop()
	record(200, 700)
	waitFor(t, "writer notices the outage and spools", func() bool {
		return !w.PostgresUp() && w.Stats().SpoolEvents > 0 && w.Stats().Queued == 0
	})
	if got := w.Stats().Dropped; got != 0 {
		t.Fatalf("got %d dropped during the outage, want 0", got)
	}

	pg.start()
	record(700, 800)
	waitFor(t, "spool replayed after restart", func() bool { return w.Backlog() == 0 && w.PostgresUp() })
	if err := w.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	if got := w.Stats().Dropped; got != 0 {
		t.Errorf("got %d dropped, want 0", got)
	}
	assertExactlyOnce(t, pool, evs)
}
