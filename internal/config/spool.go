package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// spoolSetting is a spool directory serve creates (os.MkdirAll) at start
// and where a problem with it is reported: the file and line of its key,
// or the environment variable that set it (Line 0).
type spoolSetting struct {
	key   string // "audit.spool_dir" or "notifications.spool_dir"
	dir   string
	where Error
	// parent, for a default notification spool, is the audit spool's
	// setting it lives under.
	parent *spoolSetting
}

// spoolSettings records, after defaults and the environment, the spool
// directories serve would open: the audit spool with a database (without
// one events stay in memory), the notification spool with a webhook URL
// (without one nothing is spooled; a reload that sets one keeps the
// running spool_dir, so it is serve's start that must be able to open it).
func (d *decoder) spoolSettings(cfg *Config, env Env) {
	audit := spoolSetting{key: "audit.spool_dir", dir: cfg.Writer.SpoolDir, where: Error{File: d.file}}
	switch {
	case env.Get(EnvSpoolDir) != "":
		audit.where = Error{File: EnvSpoolDir}
	case d.has("audit.spool_dir") && d.lines["audit.spool_dir"] > 0:
		audit.where.Line = d.lines["audit.spool_dir"]
	}
	if cfg.DatabaseURL != "" {
		cfg.spools = append(cfg.spools, audit)
	}
	if cfg.Notify.WebhookURL != "" {
		n := spoolSetting{key: "notifications.spool_dir", dir: cfg.Notify.SpoolDir, where: Error{File: d.file, Line: d.lines["notifications.spool_dir"]}}
		if !d.has("notifications.spool_dir") {
			n.where, n.parent = audit.where, &audit
		}
		cfg.spools = append(cfg.spools, n)
	}
}

// spoolProblems are the spool directories serve would fail to open, each
// at its setting. Nothing is created: a directory is usable when it is a
// writable directory, or when its nearest existing ancestor is one (serve
// creates the rest). A default notification spool under an audit spool
// that is already reported is not reported again.
func (c *Config) spoolProblems() []error {
	var errs []error
	reported := map[string]bool{}
	for _, s := range c.spools {
		if s.parent != nil && reported[s.parent.dir] {
			continue
		}
		err := checkSpoolDir(s.dir)
		if err == nil {
			continue
		}
		reported[s.dir] = true
		e := s.where
		switch {
		case s.parent != nil:
			e.Msg = fmt.Sprintf("%s (default %s, under %s): %v", s.key, s.dir, s.parent.key, err)
		case e.Line == 0 && e.File != EnvSpoolDir:
			e.Msg = fmt.Sprintf("%s (default %s): %v", s.key, s.dir, err)
		case e.File == EnvSpoolDir:
			e.Msg = err.Error()
		default:
			e.Msg = fmt.Sprintf("%s: %v", s.key, err)
		}
		errs = append(errs, &e)
	}
	return errs
}

// access(2)'s W_OK and X_OK, the same on every Unix (syscall does not name
// them).
const (
	accessWrite  = 0x2
	accessSearch = 0x1
)

// checkSpoolDir reports why os.MkdirAll(dir) and files in it would fail,
// without creating anything.
func checkSpoolDir(dir string) error {
	p := filepath.Clean(dir)
	for {
		fi, err := os.Stat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
			// Walk up to what exists (ENOTDIR: a file on the way, which
			// the next round names).
			parent := filepath.Dir(p)
			if parent == p {
				return fmt.Errorf("cannot create %s: %s does not exist", dir, p)
			}
			p = parent
			continue
		case err != nil:
			return fmt.Errorf("cannot use %s: %w", dir, err)
		case !fi.IsDir():
			return fmt.Errorf("cannot use %s: %s is not a directory", dir, p)
		}
		verb := "use"
		if p != filepath.Clean(dir) {
			verb = "create"
		}
		if fsName := noDirsFS(p); fsName != "" {
			return fmt.Errorf("cannot %s %s: %s is on %s, where no directory can be made", verb, dir, p, fsName)
		}
		if err := syscall.Access(p, accessWrite|accessSearch); err != nil {
			return fmt.Errorf("cannot %s %s: %s is not writable: %w", verb, dir, p, err)
		}
		return nil
	}
}
