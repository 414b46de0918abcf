package config

import (
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func TestReadEnvReadsTheListOnly(t *testing.T) {
	var asked []string
	e := ReadEnv(func(k string) string {
		asked = append(asked, k)
		if k == EnvListen || k == "UNLISTED" {
			return "x"
		}
		return ""
	})
	if got, want := len(asked), len(Vars); got != want {
		t.Errorf("ReadEnv asked for %d variables, want the %d of Vars", got, want)
	}
	if e.Get(EnvListen) != "x" || e.Get("UNLISTED") != "" || len(e) != 1 {
		t.Errorf("Env = %v, want only GUARD_LISTEN", e)
	}
}

func TestDefaultSpoolDir(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the XDG rules are Linux's")
	}
	tests := []struct {
		name string
		env  Env
		want string
	}{
		{"xdg", Env{"XDG_CACHE_HOME": "/c", "HOME": "/h"}, "/c/guard/spool"},
		{"relative xdg ignored", Env{"XDG_CACHE_HOME": "c", "HOME": "/h"}, "/h/.cache/guard/spool"},
		{"home", Env{"HOME": "/h"}, "/h/.cache/guard/spool"},
		{"nothing", Env{}, filepath.Join("/tmp", "guard-spool")},
	}
	for _, tt := range tests {
		if got := tt.env.DefaultSpoolDir("/tmp"); got != tt.want {
			t.Errorf("%s: DefaultSpoolDir = %q, want %q", tt.name, got, tt.want)
		}
	}
	c, err := Parse("", nil, Env{"HOME": "/h"})
	if err != nil || c.Writer.SpoolDir != "/h/.cache/guard/spool" {
		t.Errorf("Parse: spool dir %q, %v; want it from HOME", c.Writer.SpoolDir, err)
	}
}

// TestDecodeEveryFieldType decodes a file with every key of the file type,
// so a section type the decoder cannot handle fails here, not at an
// operator's start.
func TestDecodeEveryFieldType(t *testing.T) {
	y := strings.Replace(apiExample, "redis_url: redis://127.0.0.1:6379/0\n", "", 1) +
		"redis: {cluster: [a:7000], sentinel: {master: m, addrs: [b:26379]}, username: u, password: p, tls: true}\n"
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(y), &n); err != nil {
		t.Fatal(err)
	}
	var f file
	d := newDecoder("t")
	d.decode(n.Content[0], "config", reflect.ValueOf(&f).Elem(), bounds{})
	if err := d.err(); err != nil {
		t.Fatalf("decode: %v", err)
	}
	if f.Store.Budget != 50*time.Millisecond || f.ForwardAuth.UserHeader != "X-Guard-User" ||
		f.Redis.Sentinel == nil || !f.Redis.TLS || len(f.Actions["login"].Lockout.Ladder) != 6 {
		t.Errorf("decoded %+v", f)
	}
}

func TestNewLogger(t *testing.T) {
	tests := []struct {
		format, level, wantErr string
	}{
		{"text", "info", ""},
		{"json", "debug", ""},
		{"xml", "info", `log format "xml"`},
		{"text", "loud", `log level "loud"`},
	}
	for _, tt := range tests {
		var b strings.Builder
		l, err := NewLogger(&b, tt.format, tt.level)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("NewLogger(%q, %q) = %v, want error %q", tt.format, tt.level, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("NewLogger(%q, %q): %v", tt.format, tt.level, err)
		}
		l.Debug("d")
		l.Info("hello")
		if got := b.String(); !strings.Contains(got, "hello") || (tt.level == "info") == strings.Contains(got, "DEBUG") {
			t.Errorf("NewLogger(%q, %q) wrote %q", tt.format, tt.level, got)
		}
	}
}
