package sdk_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestModuleGraphIsSDKAlone: a program that imports only the SDK has the
// SDK module and nothing else in its module graph (`go list -m all`), and
// builds from the standard library alone, with no network (GOPROXY=off):
// the server's dependencies stay out of callers' graphs and dependency
// scanners.
func TestModuleGraphIsSDKAlone(t *testing.T) {
	sdkDir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/caller\n\ngo 1.24\n\n"+
		"require github.com/guardhq/guard/sdk v0.0.0\n\n"+
		"replace github.com/guardhq/guard/sdk => "+sdkDir+"\n")
	write("main.go", `package main

import "github.com/guardhq/guard/sdk"

func main() { _ = sdk.New("http://127.0.0.1:8080", "key") }
`)
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOPROXY=off", "GOFLAGS=-mod=mod")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	mods := strings.Split(run("list", "-m", "all"), "\n")
	want := []string{"example.com/caller", "github.com/guardhq/guard/sdk v0.0.0 => " + sdkDir}
	if strings.Join(mods, "\n") != strings.Join(want, "\n") {
		t.Errorf("go list -m all =\n%s\nwant\n%s", strings.Join(mods, "\n"), strings.Join(want, "\n"))
	}
	for _, p := range strings.Split(run("list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "."), "\n") {
		if p != "" && p != "example.com/caller" && p != "github.com/guardhq/guard/sdk" {
			t.Errorf("the caller builds %s, outside the standard library and the SDK", p)
		}
	}
	run("build", "-o", filepath.Join(dir, "caller"), ".")
}
