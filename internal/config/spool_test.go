package config

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestCheckSpoolDirs: config check refuses a spool directory serve could
// not create, at the line of its key, and creates nothing.
func TestCheckSpoolDirs(t *testing.T) {
	tmp := t.TempDir()
	file := filepath.Join(tmp, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	const db = "database_url: postgres://postgres@127.0.0.1:5432/guard\n"
	const hook = "notifications: {webhook_url: https://example.com/hook, secret: 0123456789abcdef0123456789abcdef"
	tests := []struct {
		name string
		yaml string
		env  map[string]string
		want []string // every spool warning; none: ok
	}{
		{"missing under a writable directory", db + "audit: {spool_dir: " + tmp + "/a/b}\n", nil, nil},
		{"existing directory", db + "audit: {spool_dir: " + tmp + "}\n", nil, nil},
		{"a file", db + "audit:\n  spool_dir: " + file + "\n", nil,
			[]string{"g.yaml:3: audit.spool_dir: cannot use " + file + ": " + file + " is not a directory"}},
		{"under a file", db + "audit: {spool_dir: " + file + "/spool}\n", nil,
			[]string{"g.yaml:2: audit.spool_dir: cannot use " + file + "/spool: " + file + " is not a directory"}},
		{"unused without a database", "audit: {spool_dir: " + file + "}\n", nil, nil},
		{"from the environment", db, map[string]string{EnvSpoolDir: file},
			[]string{"GUARD_SPOOL_DIR: cannot use " + file + ": " + file + " is not a directory"}},
		{"default", db, map[string]string{"HOME": file, "XDG_CACHE_HOME": ""},
			[]string{"g.yaml: audit.spool_dir (default " + file + "/.cache/guard/spool): cannot use " + file + "/.cache/guard/spool: " + file + " is not a directory"}},
		{"notifications", hook + ",\n  spool_dir: " + file + "}\n", nil,
			[]string{"g.yaml:2: notifications.spool_dir: cannot use " + file + ": " + file + " is not a directory"}},
		{"notifications unused without a webhook", "notifications: {spool_dir: " + file + "}\n", nil, nil},
		{"notifications default", "audit:\n  spool_dir: " + file + "\n" + hook + "}\n", nil,
			[]string{"g.yaml:2: notifications.spool_dir (default " + file + "/notifications, under audit.spool_dir): cannot use " + file + "/notifications: " + file + " is not a directory"}},
		{"notifications default reported once", db + "audit:\n  spool_dir: " + file + "\n" + hook + "}\n", nil,
			[]string{"g.yaml:3: audit.spool_dir: cannot use " + file + ": " + file + " is not a directory"}},
	}
	if runtime.GOOS == "linux" {
		tests = append(tests, struct {
			name string
			yaml string
			env  map[string]string
			want []string
		}{"procfs", db + "audit: {spool_dir: /proc/guard-spool}\n", nil,
			[]string{"g.yaml:2: audit.spool_dir: cannot create /proc/guard-spool: /proc is on procfs, where no directory can be made"}})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "g.yaml")
			if err := os.WriteFile(path, []byte(tt.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			_, res := Check(path, envMap(tt.env))
			if len(res.Problems) != 0 {
				t.Fatalf("problems %v, want none (a spool directory is this machine's, a warning)", res.Problems)
			}
			var got, want []string
			for _, w := range res.Warnings {
				if strings.HasSuffix(w.Msg, spoolWarningNote) {
					got = append(got, strings.ReplaceAll(w.Where+": "+strings.TrimSuffix(w.Msg, spoolWarningNote), path, "g.yaml"))
				}
			}
			want = append(want, tt.want...)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("spool warnings =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if err := res.Err(true); len(tt.want) > 0 && err == nil {
				t.Errorf("--strict verdict ok, want a failure: a spool is unusable")
			}
			if err := res.Err(false); err != nil {
				t.Errorf("verdict %v, want ok (a warning)", err)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(tmp, "a")); !os.IsNotExist(err) {
		t.Errorf("config check created %s/a (stat: %v); it must create nothing", tmp, err)
	}
}

// TestCheckSpoolDirNotWritable: a directory serve could not write in is
// refused (root may write anywhere, so this runs as another user only).
func TestCheckSpoolDirNotWritable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root passes every permission check")
	}
	ro := filepath.Join(t.TempDir(), "ro")
	if err := os.Mkdir(ro, 0o500); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{ro, ro + "/spool"} {
		if err := checkSpoolDir(dir); err == nil || !strings.Contains(err.Error(), ro+" is not writable") {
			t.Errorf("checkSpoolDir(%s) = %v, want %s is not writable", dir, err, ro)
		}
	}
}
