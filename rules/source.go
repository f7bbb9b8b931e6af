package rules

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"sync"
	"time"

	"github.com/sluice-go/sluice/core"
	"github.com/sluice-go/sluice/internal/clock"
)

// DecodeFile decodes the file at path with the default limits; see
// DecodeLimits.DecodeFile.
func DecodeFile(path string) (Set, error) { return DecodeLimits{}.DecodeFile(path) }

// DecodeFile reads the file at path and decodes it with Decode, in the
// format its extension names (see FormatOf). A file over MaxBytes is refused
// by its size, unread. Errors about the content are *PathError values that
// prefix the path.
func (l DecodeLimits) DecodeFile(path string) (Set, error) {
	f, err := FormatOf(path)
	if err != nil {
		return Set{}, err
	}
	data, err := readFile(path, l.maxBytes())
	if err != nil {
		return Set{}, err
	}
	s, err := l.Decode(data, f)
	if err != nil {
		return Set{}, &PathError{Path: path, Err: err}
	}
	return s, nil
}

// PathError is an error about the content of a rule file: Err (often an
// *Error, reached with errors.As) says what is wrong with the file at Path.
type PathError struct {
	Path string
	Err  error
}

func (e *PathError) Error() string { return e.Path + ": " + e.Err.Error() }

// Unwrap returns Err.
func (e *PathError) Unwrap() error { return e.Err }

// readFile reads the file at path, refusing it unread, as a *PathError,
// when it holds more than limit bytes.
func readFile(path string, limit int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > int64(limit) {
		return nil, &PathError{Path: path, Err: tooLarge(fi.Size(), limit)}
	}
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)+1)) // the file may have grown
	if err != nil {
		return nil, err
	}
	if len(data) > limit {
		return nil, &PathError{Path: path, Err: tooLarge(int64(len(data)), limit)}
	}
	return data, nil
}

// defaultPollInterval is how often a FileSource looks at its file when no
// WithPollInterval option is given.
const defaultPollInterval = time.Second

// racyWindow is how close to the moment of reading a file's modification
// time must be for the file to be read again even if its size and time look
// unchanged: file systems keep modification times coarsely (a clock tick,
// or two seconds on FAT), so a write just after a read can leave both as
// they were.
const racyWindow = 2 * time.Second

// ErrSourceClosed is returned by Start on a FileSource that has been
// closed.
var ErrSourceClosed = errors.New("rules: file source closed")

// FileSourceOption configures a FileSource.
type FileSourceOption func(*FileSource)

// WithPollInterval sets how often the file is looked at. Zero or less means
// one second.
func WithPollInterval(d time.Duration) FileSourceOption {
	return func(s *FileSource) {
		if d > 0 {
			s.interval = d
		}
	}
}

// WithClock makes the source wait on c between polls instead of the system
// clock. Tests pass a *sluicetest.ManualClock. A nil c is ignored.
func WithClock(c core.Clock) FileSourceOption {
	return func(s *FileSource) {
		if c != nil {
			s.clock = c
		}
	}
}

// WithErrorHandler sets the function told about problems found while
// watching: a file that cannot be read or has gone, content that does not
// decode or validate, and rule sets the apply function refused. It is called
// from the source's goroutine, once per problem (the same bad content, or
// the same missing file, is not reported again). The default logs with the
// standard log package; a nil f is ignored.
func WithErrorHandler(f func(error)) FileSourceOption {
	return func(s *FileSource) {
		if f != nil {
			s.onError = f
		}
	}
}

// WithFormat makes the source decode the file as f instead of the format
// its extension names.
func WithFormat(f Format) FileSourceOption {
	return func(s *FileSource) { s.format = f }
}

// WithDecodeLimits makes the source read and decode the file within l
// instead of the default limits (see DecodeLimits).
func WithDecodeLimits(l DecodeLimits) FileSourceOption {
	return func(s *FileSource) { s.limits = l }
}

// FileSource watches one rule file and hands every new content, decoded and
// validated, to an apply function, so rules change while a program runs.
//
// It polls: every interval (WithPollInterval, one second by default, timed
// on the source's clock) it stats the file, and reads it when its size,
// modification time or identity changed, or when the modification time is
// too recent to be trusted. Content whose SHA-256 equals the last content
// read is ignored, so touching a file or rewriting it unchanged applies
// nothing. No file-system notification is used, so it works the same on
// every platform and on network and container-mounted volumes.
//
// When the file is malformed, holds an invalid rule, is refused by the apply
// function, cannot be read or has disappeared, the error handler is told
// and nothing is applied: the rules in force stay in force until a good
// file appears. Write files atomically (write a temporary file, then
// rename it over the watched one) so a poll never reads half a file.
//
// Start begins watching; Close stops and waits. The methods are safe for
// concurrent use; Close must not be called from the apply function or the
// error handler.
type FileSource struct {
	path     string
	format   Format
	limits   DecodeLimits
	apply    func(Set) error
	onError  func(error)
	clock    core.Clock
	interval time.Duration

	mu       sync.Mutex // guards starting, started and closed
	starting bool
	started  bool
	closed   bool
	stop     chan struct{}
	done     chan struct{}

	// Poll state: used by Start before the goroutine runs, then only by it.
	stamp    os.FileInfo // the file as last read
	readAt   time.Time   // wall time of that read, to spot racy stamps
	seen     [sha256.Size]byte
	haveSeen bool
	failing  string // the read problem last reported, so it is told once
}

// NewFileSource returns a source that watches the file at path and calls
// apply with each new rule set found in it. The format comes from the
// extension (see FormatOf) unless WithFormat is given. apply must not be
// nil; the source does nothing until Start.
func NewFileSource(path string, apply func(Set) error, opts ...FileSourceOption) (*FileSource, error) {
	if apply == nil {
		return nil, errors.New("rules: NewFileSource needs an apply function")
	}
	s := &FileSource{
		path:     path,
		apply:    apply,
		onError:  func(err error) { log.Printf("sluice: %v", err) },
		clock:    clock.System(),
		interval: defaultPollInterval,
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	for _, o := range opts {
		o(s)
	}
	if s.format == 0 {
		f, err := FormatOf(path)
		if err != nil {
			return nil, err
		}
		s.format = f
	}
	if s.format != JSON && s.format != YAML {
		return nil, fmt.Errorf("rules: unknown format %v", s.format)
	}
	return s, nil
}

// Path returns the path of the watched file.
func (s *FileSource) Path() string { return s.path }

// Start reads the file, decodes it and calls apply, in the calling
// goroutine, then starts polling in a goroutine of its own. If that first
// load fails (the file is missing, malformed or invalid, or apply refuses
// it), Start returns the error and does not start: a program should not
// begin with rules it did not mean. Start may be called once; it returns
// ErrSourceClosed after Close.
func (s *FileSource) Start() error {
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return ErrSourceClosed
	case s.started || s.starting:
		s.mu.Unlock()
		return errors.New("rules: file source already started")
	}
	s.starting = true
	s.mu.Unlock()

	err := s.poll(true) // calls apply: not under the lock

	s.mu.Lock()
	defer s.mu.Unlock()
	s.starting = false
	if err != nil {
		return err
	}
	if s.closed {
		return ErrSourceClosed
	}
	s.started = true
	go s.run()
	return nil
}

// Close stops polling and waits for the polling goroutine to end. It is
// idempotent and may be called whether or not Start was.
func (s *FileSource) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	started := s.started
	s.mu.Unlock()
	close(s.stop)
	if started {
		<-s.done
	}
	return nil
}

func (s *FileSource) run() {
	defer close(s.done)
	for {
		t := s.clock.NewTimer(s.interval)
		select {
		case <-s.stop:
			t.Stop()
			return
		case <-t.C():
		}
		if err := s.poll(false); err != nil {
			s.onError(err)
		}
	}
}

// poll looks at the file once and applies new content. It returns the
// problem to report, or nil when there is none or it was already reported.
// With first set it always reads and reports.
func (s *FileSource) poll(first bool) error {
	fi, err := os.Stat(s.path)
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("rules: %s is not a regular file", s.path)
	}
	if err != nil {
		return s.fail(first, err)
	}
	if !first && s.stamp != nil && os.SameFile(fi, s.stamp) && fi.Size() == s.stamp.Size() &&
		fi.ModTime().Equal(s.stamp.ModTime()) && fi.ModTime().Before(s.readAt.Add(-racyWindow)) {
		return nil // unchanged, and the stamp is old enough to trust
	}
	readAt := time.Now()
	data, err := readFile(s.path, s.limits.maxBytes())
	if err != nil {
		return s.fail(first, err)
	}
	s.failing = ""
	s.stamp, s.readAt = fi, readAt
	sum := sha256.Sum256(data)
	if s.haveSeen && sum == s.seen {
		return nil
	}
	s.seen, s.haveSeen = sum, true
	set, err := s.limits.Decode(data, s.format)
	if err != nil {
		return &PathError{Path: s.path, Err: err}
	}
	if err := s.apply(set); err != nil {
		return &PathError{Path: s.path, Err: err}
	}
	return nil
}

// fail records that the file could not be read and returns the error to
// report, or nil when the same problem was reported last time. The file is
// read afresh once it is back.
func (s *FileSource) fail(first bool, err error) error {
	s.stamp = nil
	key := err.Error()
	if !first && key == s.failing {
		return nil
	}
	s.failing = key
	return fmt.Errorf("rules: cannot read the rule file, the rules in force stay: %w", err)
}
