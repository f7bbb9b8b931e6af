package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/rules"
)

// maxFileBytes bounds a read of a rule file: rules.Decode's default limit,
// which refuses a larger document with an error that says so (one byte
// more is read, for it to see).
const maxFileBytes = 4 << 20

// racyWindow is how close to the moment of reading a file's modification
// time must be for the file to be read again even if its size and time
// look unchanged: file systems keep modification times coarsely (a clock
// tick, or two seconds on FAT), so a write just after a read can leave
// both as they were.
const racyWindow = 2 * time.Second

// errReadOnly is RuleFile's answer to Save.
var errReadOnly = errors.New("fleet: a rule file is edited in place, not saved through its store")

// RuleFile returns a rule store of the one rule file at path, for Join's
// Config.Rules: a program that keeps its rules in a file follows them as
// a fleet follows a shared store, with the same Status and the same
// guarantees (a version is loaded whole or refused whole, the rules in
// force staying).
//
// The file is every application's version in force, in the format its
// extension names (rules.FormatOf; Join refuses another extension). It is
// looked at every CheckInterval (1 s by default): a stat, and a read when
// its size, modification time or identity changed, or when the time is
// too recent to trust. Content that differs from the last content read is
// a new version, numbered from 1; touching the file or rewriting it
// unchanged makes none. A file that cannot be read or has gone is a
// failure of the store (Status.Err): the rules in force stay. No
// file-system notification is used, so it works alike on every platform
// and on network and container volumes. Write the file atomically (a
// temporary file renamed over it) so a read never sees half of it.
//
// The store keeps the last report of each instance in memory; Save
// refuses (edit the file), and the history holds the version in force
// only. One RuleFile serves one Join.
func RuleFile(path string) cluster.RuleStore {
	f, err := rules.FormatOf(path)
	return &fileRules{path: path, format: f, formatErr: err}
}

// fileRules is RuleFile's store.
type fileRules struct {
	path      string
	format    rules.Format
	formatErr error

	mu      sync.Mutex
	stamp   os.FileInfo // the file as last read
	readAt  time.Time   // wall time of that read, to spot racy stamps
	cur     cluster.RuleVersion
	reports map[string]cluster.RuleReport
}

func (s *fileRules) Apps(context.Context) ([]string, error) { return nil, nil }

// Current looks at the file and returns its content as the version in
// force, numbered anew when it changed.
func (s *fileRules) Current(context.Context, string) (cluster.RuleVersion, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.formatErr != nil {
		return cluster.RuleVersion{}, s.formatErr
	}
	fi, err := os.Stat(s.path)
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s is not a regular file", s.path)
	}
	if err != nil {
		s.stamp = nil // read afresh once it is back
		return cluster.RuleVersion{}, fmt.Errorf("cannot read the rule file, the rules in force stay: %w", err)
	}
	if s.stamp != nil && os.SameFile(fi, s.stamp) && fi.Size() == s.stamp.Size() &&
		fi.ModTime().Equal(s.stamp.ModTime()) && fi.ModTime().Before(s.readAt.Add(-racyWindow)) {
		return s.cur, nil // unchanged, and the stamp is old enough to trust
	}
	readAt := time.Now()
	data, err := readFile(s.path)
	if err != nil {
		s.stamp = nil
		return cluster.RuleVersion{}, fmt.Errorf("cannot read the rule file, the rules in force stay: %w", err)
	}
	s.stamp, s.readAt = fi, readAt
	if s.cur.Version == 0 || !bytes.Equal(data, s.cur.Doc) {
		s.cur = cluster.RuleVersion{Version: s.cur.Version + 1, Doc: data, Author: s.path, At: fi.ModTime()}
	}
	return s.cur, nil
}

// readFile reads at most maxFileBytes+1 bytes of the file at path.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxFileBytes+1))
}

func (s *fileRules) Version(_ context.Context, _ string, n int64) (cluster.RuleVersion, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n == 0 || n != s.cur.Version {
		return cluster.RuleVersion{}, cluster.ErrNoVersion
	}
	return s.cur, nil
}

func (s *fileRules) History(_ context.Context, _ string, limit int) ([]cluster.RuleVersion, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur.Version == 0 || limit <= 0 {
		return nil, nil
	}
	return []cluster.RuleVersion{s.cur}, nil
}

func (s *fileRules) Save(context.Context, string, int64, cluster.RuleVersion) (cluster.RuleVersion, error) {
	return cluster.RuleVersion{}, errReadOnly
}

// Watch announces nothing, not even that it listens (there is nothing a
// caller could miss): the follower's reads every CheckInterval see the
// changes.
func (s *fileRules) Watch(ctx context.Context, _ string, _ func(int64)) error {
	<-ctx.Done()
	return ctx.Err()
}

func (s *fileRules) Report(_ context.Context, _ string, r cluster.RuleReport, _ time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reports == nil {
		s.reports = map[string]cluster.RuleReport{}
	}
	s.reports[r.Instance] = r
	return nil
}

func (s *fileRules) Reports(context.Context, string) ([]cluster.RuleReport, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]cluster.RuleReport, 0, len(s.reports))
	for _, r := range s.reports {
		out = append(out, r)
	}
	return out, nil
}

func (s *fileRules) Audit(context.Context, cluster.AuditEntry) error { return nil }

func (s *fileRules) AuditLog(context.Context, string, int) ([]cluster.AuditEntry, error) {
	return nil, nil
}
