package notify

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// The spool is a directory with one file per pending notification, named
// by its id (a ULID, so names sort by time). A file appears whole or not
// at all: it is written under a temporary name, fsync'd and renamed, and
// the directory is fsync'd after the rename and after a removal.
const (
	spoolExt  = ".ntf"
	tmpPrefix = ".tmp-"
	// badExt marks a file Guard could not read; it is kept for a person
	// to look at, never retried.
	badExt = ".bad"
)

// spool is the on-disk queue. Its methods are called by one goroutine at a
// time for a given file (the spooler writes, the deliverer removes).
type spool struct {
	dir string
}

// openSpool creates dir if needed and removes temporary files a crash left
// behind.
func openSpool(dir string) (*spool, error) {
	if dir == "" {
		return nil, errors.New("notify: a spool directory is required")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("notify: create the notification spool %s (notifications.spool_dir, default <audit.spool_dir>/notifications): %w", dir, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("notify: read the notification spool %s: %w", dir, err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	return &spool{dir: dir}, nil
}

// load reads every pending notification, oldest first. Files it cannot
// read are renamed to *.bad and reported in bad.
func (s *spool) load() (out []*pending, bad []error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, []error{fmt.Errorf("read spool: %w", err)}
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if n := e.Name(); strings.HasSuffix(n, spoolExt) && e.Type().IsRegular() {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	for _, n := range names {
		path := filepath.Join(s.dir, n)
		b, err := os.ReadFile(path)
		var p *pending
		if err == nil {
			p, err = decodeRecord(b)
		}
		if err == nil && p.ev.ID+spoolExt != n {
			err = fmt.Errorf("record id %q does not match the file name", p.ev.ID)
		}
		if err != nil {
			bad = append(bad, fmt.Errorf("%s: %w", path, err))
			_ = os.Rename(path, path+badExt)
			continue
		}
		out = append(out, p)
	}
	return out, bad
}

// writeParallel bounds the files writeBatch writes (and fsyncs) at once:
// concurrent fsyncs share the file system's journal commits, so a burst
// of lockouts costs little more than one.
const writeParallel = 16

// writeBatch stores each of ps durably under its id: every file is
// written under a temporary name and fsync'd (up to writeParallel at
// once), renamed, and the directory fsync'd once for the batch. It
// returns one error per notification, nil for those now on disk.
func (s *spool) writeBatch(ps []*pending) []error {
	errs := make([]error, len(ps))
	tmps := make([]string, len(ps))
	sem := make(chan struct{}, writeParallel)
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			tmps[i], errs[i] = s.writeTemp(p)
		}()
	}
	wg.Wait()
	renamed := false
	for i, p := range ps {
		if errs[i] != nil {
			continue
		}
		if err := os.Rename(tmps[i], s.path(p.ev.ID)); err != nil {
			_ = os.Remove(tmps[i])
			errs[i] = fmt.Errorf("write spool file: %w", err)
			continue
		}
		renamed = true
	}
	if renamed {
		if err := s.syncDir(); err != nil {
			for i := range errs {
				if errs[i] == nil {
					errs[i] = err
				}
			}
		}
	}
	return errs
}

// writeTemp writes p's record to a new temporary file and fsyncs it.
func (s *spool) writeTemp(p *pending) (string, error) {
	b, err := encodeRecord(p)
	if err != nil {
		return "", fmt.Errorf("encode notification: %w", err)
	}
	if strings.ContainsAny(p.ev.ID, `/\.`) || p.ev.ID == "" {
		return "", fmt.Errorf("notification id %q cannot name a file", p.ev.ID)
	}
	f, err := os.CreateTemp(s.dir, tmpPrefix+"*")
	if err != nil {
		return "", fmt.Errorf("create spool file: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return "", fmt.Errorf("write spool file: %w", err)
	}
	return f.Name(), nil
}

// remove deletes a delivered (or given up) notification. The removal is
// not fsync'd: if a crash undoes it, the notification is sent again,
// which at-least-once delivery allows.
func (s *spool) remove(id string) error {
	if err := os.Remove(s.path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove spool file: %w", err)
	}
	return nil
}

func (s *spool) path(id string) string { return filepath.Join(s.dir, id+spoolExt) }

// syncDir makes a rename or removal in the directory durable.
func (s *spool) syncDir() error {
	d, err := os.Open(s.dir)
	if err != nil {
		return fmt.Errorf("open spool directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync spool directory: %w", err)
	}
	return nil
}
