package testenv

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// privateStartTimeout bounds how long a private redis-server may take to
// answer PING after it is started.
const privateStartTimeout = 5 * time.Second

// RedisServer is a redis-server of the test's own on a free loopback port,
// for tests that flush scripts, kill, restart or pause the server; the
// shared one is never disturbed. Its methods are called from the test's
// goroutine; each fails the test on error.
type RedisServer struct {
	tb   testing.TB
	bin  string
	port int
	dir  string
	args []string  // extra redis-server arguments
	cmd  *exec.Cmd // nil while killed
}

// PrivateRedis starts a private redis-server (no persistence, in a temp
// dir; args are further redis-server arguments, e.g. "--replicaof", host,
// port) and waits until it answers; Missing when redis-server is not
// installed. It is killed when the test ends.
func PrivateRedis(tb testing.TB, args ...string) *RedisServer {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		Missing(tb, "no redis-server binary for a private instance: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("find a free port: %v", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	s := &RedisServer{tb: tb, bin: bin, port: port, dir: tb.TempDir(), args: args}
	tb.Cleanup(func() {
		if s.cmd != nil {
			_ = s.cmd.Process.Kill()
			_ = s.cmd.Wait()
		}
	})
	s.Restart()
	return s
}

// Port is the server's port.
func (s *RedisServer) Port() int { return s.port }

// Addr is the server's host:port.
func (s *RedisServer) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// URL is the server's redis:// URL (database 0).
func (s *RedisServer) URL() string { return "redis://" + s.Addr() + "/0" }

// Restart starts the server again on the same port after Kill (PrivateRedis
// uses it for the first start) and waits up to 5s until it answers PING.
func (s *RedisServer) Restart() {
	s.tb.Helper()
	if s.cmd != nil {
		s.tb.Fatalf("restart private redis-server: it is still running")
	}
	// A config file (an argument that is no option) must come first.
	var args []string
	extra := s.args
	if len(extra) > 0 && !strings.HasPrefix(extra[0], "--") {
		args, extra = append(args, extra[0]), extra[1:]
	}
	args = append(args, "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir)
	cmd := exec.Command(s.bin, append(args, extra...)...)
	if err := cmd.Start(); err != nil {
		s.tb.Fatalf("start redis-server: %v", err)
	}
	s.cmd = cmd
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(privateStartTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.tb.Fatalf("private redis-server on port %d did not answer within %v: %v", s.port, privateStartTimeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Kill ends the server with SIGKILL (no goodbye to its clients) and waits
// for it to exit.
func (s *RedisServer) Kill() {
	s.tb.Helper()
	if s.cmd == nil {
		s.tb.Fatalf("kill private redis-server: it is not running")
	}
	if err := s.cmd.Process.Kill(); err != nil {
		s.tb.Fatalf("kill redis-server: %v", err)
	}
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Pause stops the server with SIGSTOP: a hung server whose port still
// accepts connections but answers nothing.
func (s *RedisServer) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused server with SIGCONT.
func (s *RedisServer) Resume() { s.signal(syscall.SIGCONT) }

func (s *RedisServer) signal(sig syscall.Signal) {
	s.tb.Helper()
	if s.cmd == nil {
		s.tb.Fatalf("signal private redis-server %v: it is not running", sig)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.tb.Fatalf("signal redis-server %v: %v", sig, err)
	}
}
