package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/guardhq/guard/internal/config"
)

// TestSystemdUnit keeps examples/systemd true: the unit passes
// systemd-analyze verify (where systemd is installed), its serve flags
// and every variable it and its environment file set are Guard's.
func TestSystemdUnit(t *testing.T) {
	dir := filepath.Join("..", "..", "examples", "systemd")
	unit, err := os.ReadFile(filepath.Join(dir, "guard.service"))
	if err != nil {
		t.Fatal(err)
	}
	env, err := os.ReadFile(filepath.Join(dir, "guard.env"))
	if err != nil {
		t.Fatal(err)
	}

	// Every GUARD_ variable named is one Guard reads.
	var names []string
	for _, v := range config.Vars {
		names = append(names, v.Name)
	}
	for _, m := range regexp.MustCompile(`GUARD_[A-Z_]+`).FindAllString(string(unit)+string(env), -1) {
		if !slices.Contains(names, m) {
			t.Errorf("%s is not an environment variable Guard reads", m)
		}
	}

	// The serve command line: its flags are serve's.
	exe := regexp.MustCompile(`(?m)^ExecStart=(\S+) serve (.*)$`).FindStringSubmatch(string(unit))
	if exe == nil {
		t.Fatal("no ExecStart=... serve line in guard.service")
	}
	help := serveFlagNames(t)
	for _, f := range strings.Fields(exe[2]) {
		if name, ok := strings.CutPrefix(f, "--"); ok && !slices.Contains(help, name) {
			t.Errorf("guard.service passes --%s, which guard serve does not know", name)
		}
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed: the unit's syntax is not verified")
	}
	// verify wants ExecStart's binary to exist: this test's stands in.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "guard.service")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(string(unit), exe[1], self)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// serveFlagNames lists the flags `guard serve --help` describes.
func serveFlagNames(t *testing.T) []string {
	t.Helper()
	var stdout, stderr strings.Builder
	_ = run(t.Context(), []string{"guard", "serve", "--help"}, envMap(nil), &stdout, &stderr)
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^\s+-{1,2}([a-z][a-z-]*)`).FindAllStringSubmatch(stdout.String()+stderr.String(), -1) {
		names = append(names, m[1])
	}
	if len(names) == 0 {
		t.Fatalf("no flags in guard serve --help:\n%s%s", stdout.String(), stderr.String())
	}
	return names
}
