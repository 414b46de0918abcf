package backtest

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair (Linux).
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pty number: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return m, s
}

// TestExecuteProgressBarEndsBeforeTheReport: on a terminal, where the
// progress bar (stderr) and the report (stdout) share one screen, the bar
// is finished (drawn at 100% and ended with a newline) before the report
// starts. It used to be finished after the report: the report's first
// line was glued to the bar, and the 100% bar came last.
func TestExecuteProgressBarEndsBeforeTheReport(t *testing.T) {
	url, _ := trailDB(t)
	cfg := filepath.Join(t.TempDir(), "candidate.yaml")
	yaml := "actions:\n  login:\n    limits:\n      - {dimension: ip, limit: 10, window: 1m}\n" +
		"  signup:\n    limits:\n      - {dimension: ip, limit: 100, window: 1h}\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	master, tty := openPTY(t)
	defer master.Close()
	out := make(chan string)
	go func() {
		b, _ := io.ReadAll(master) // until the terminal closes (EIO)
		out <- string(b)
	}()
	err := Execute(context.Background(), Options{ConfigPath: cfg, DatabaseURL: url, Since: day, Until: day.Add(24 * time.Hour)}, tty, tty)
	tty.Close()
	screen := strings.ReplaceAll(<-out, "\r\n", "\n")
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	bar := strings.Index(screen, "100%")
	report := strings.Index(screen, "login: ")
	if bar < 0 || report < 0 || bar > report || !strings.Contains(screen[bar:report], "\n") {
		t.Errorf("screen:\n%q\nwant the bar at 100%% and a line end before the report", screen)
	}
}
