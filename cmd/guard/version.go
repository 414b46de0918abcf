package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version is set at link time for releases
// (go build -ldflags "-X main.version=v1.2.3"); otherwise the module
// version and VCS stamp of the build are used.
var version = ""

// versionLine is what `guard --version` prints: the version, the commit it
// was built from (with "+dirty" for uncommitted changes), its time and the
// Go toolchain, e.g. "guard v1.2.3 (3fdc1ae1b2c4, 2026-12-01T08:00:00Z) go1.26.8".
func versionLine() string {
	v, rev, at := versionName(), "", ""
	if info, ok := debug.ReadBuildInfo(); ok {
		var dirty bool
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if rev != "" && dirty {
			rev += "+dirty"
		}
	}
	line := "guard " + v
	switch {
	case rev != "" && at != "":
		line += fmt.Sprintf(" (%s, %s)", rev, at)
	case rev != "":
		line += " (" + rev + ")"
	}
	return line + " " + runtime.Version()
}

// versionName is Guard's version alone: the one set at link time, else
// the module's (a `go install ...@v1.2.3`), else "(devel)".
func versionName() string {
	v := version
	if info, ok := debug.ReadBuildInfo(); ok && v == "" {
		v = info.Main.Version
	}
	if v == "" {
		v = "(devel)"
	}
	return v
}
