package rules

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/sluicetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// watch is a FileSource under test with a manual clock, recording what it
// applies and reports.
type watch struct {
	t     *testing.T
	clock *sluicetest.ManualClock
	path  string
	src   *FileSource

	mu      sync.Mutex
	applied []Set
	errs    []error
	refuse  error // returned by apply when set
}

const pollEvery = 500 * time.Millisecond

func newWatch(t *testing.T, name, content string, opts ...FileSourceOption) *watch {
	t.Helper()
	w := &watch{t: t, clock: sluicetest.NewManualClock(0), path: filepath.Join(t.TempDir(), name)}
	if content != "" {
		w.write(content)
	}
	opts = append([]FileSourceOption{WithClock(w.clock), WithPollInterval(pollEvery), WithErrorHandler(w.report)}, opts...)
	src, err := NewFileSource(w.path, w.apply, opts...)
	require.NoError(t, err)
	w.src = src
	t.Cleanup(func() { require.NoError(t, src.Close()) })
	return w
}

func (w *watch) apply(s Set) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.refuse != nil {
		return w.refuse
	}
	w.applied = append(w.applied, s)
	return nil
}

func (w *watch) report(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.errs = append(w.errs, err)
}

func (w *watch) write(content string) {
	w.t.Helper()
	require.NoError(w.t, os.WriteFile(w.path, []byte(content), 0o600))
}

// start starts the source and waits until its goroutine waits on the clock.
func (w *watch) start() {
	w.t.Helper()
	require.NoError(w.t, w.src.Start())
	w.parked()
}

func (w *watch) parked() {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(w.t, w.clock.BlockUntil(ctx, 1), "the poller never waited on the clock")
}

// tick moves the clock one poll interval and waits until that poll is done
// (the poller waits on the clock again only after it).
func (w *watch) tick() {
	w.t.Helper()
	w.clock.Advance(pollEvery)
	w.parked()
}

// seen returns how many sets were applied and errors reported so far, and
// the last of each.
func (w *watch) seen() (applied int, last Set, errs int, lastErr error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.applied) > 0 {
		last = w.applied[len(w.applied)-1]
	}
	if len(w.errs) > 0 {
		lastErr = w.errs[len(w.errs)-1]
	}
	return len(w.applied), last, len(w.errs), lastErr
}

func flowSet(thresholds ...float64) Set {
	var s Set
	for i, th := range thresholds {
		s.Flow = append(s.Flow, Flow{Resource: "r" + itoa(i), Threshold: th})
	}
	return s
}

func flowYAML(thresholds ...float64) string {
	data, err := Encode(flowSet(thresholds...), YAML)
	if err != nil {
		panic(err)
	}
	return string(data)
}

func TestFileSourceAppliesEdits(t *testing.T) {
	w := newWatch(t, "rules.yaml", flowYAML(10))
	w.start()
	n, last, _, _ := w.seen()
	require.Equal(t, 1, n, "Start applies the file at once")
	assert.Equal(t, flowSet(10), last)

	w.write(flowYAML(20)) // same size, written within the same clock tick
	w.clock.Advance(pollEvery - 1)
	n, _, _, _ = w.seen()
	assert.Equal(t, 1, n, "nothing is read before the interval has passed")
	require.Equal(t, 1, w.clock.Waiters())

	w.clock.Advance(1)
	w.parked()
	n, last, errs, _ := w.seen()
	require.Equal(t, 2, n, "the edit is applied at the next poll")
	assert.Equal(t, flowSet(20), last)

	w.tick()
	w.write(flowYAML(20)) // rewritten unchanged
	w.tick()
	n, _, errs2, _ := w.seen()
	assert.Equal(t, 2, n, "unchanged content is not applied again")
	assert.Equal(t, errs, errs2)
	assert.Equal(t, 0, errs2)

	w.write(flowYAML(20, 30))
	w.tick()
	n, last, _, _ = w.seen()
	require.Equal(t, 3, n)
	assert.Equal(t, flowSet(20, 30), last)
}

func TestFileSourceKeepsRulesOnBadFiles(t *testing.T) {
	tests := []struct {
		name    string
		give    string // the bad content
		wantErr string // after the path
		check   func(t *testing.T, err error)
	}{
		{
			name:    "malformed",
			give:    "flow: [\n",
			wantErr: "rules: yaml: line 1: did not find expected node content",
		},
		{
			name:    "invalid rule",
			give:    flowYAML(1, 2, -3),
			wantErr: `rules: flow rule 2 (resource "r02"): Threshold: must be a positive number, got -3`,
			check: func(t *testing.T, err error) {
				var re *Error
				require.ErrorAs(t, err, &re)
				assert.Equal(t, 2, re.Index)
				assert.Equal(t, "Threshold", re.Field)
			},
		},
		{
			name:    "unknown field",
			give:    "flow:\n  - resource: a\n    thresold: 3\n",
			wantErr: `rules: flow rule 0 (resource "a"): unknown field "thresold" at line 3 (did you mean "threshold"?)`,
			check: func(t *testing.T, err error) {
				var re *Error
				require.ErrorAs(t, err, &re)
				assert.Equal(t, "thresold", re.Field, "Field is the unknown key")
			},
		},
		{
			name:    "half-written",
			give:    "",
			wantErr: "rules: empty document; write {} for a document with no rules",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWatch(t, "rules.yaml", flowYAML(10))
			w.start()

			w.write(tt.give)
			w.tick()
			n, last, errs, err := w.seen()
			assert.Equal(t, 1, n, "nothing is applied")
			assert.Equal(t, flowSet(10), last)
			require.Equal(t, 1, errs)
			require.EqualError(t, err, w.path+": "+tt.wantErr)
			var pe *PathError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, w.path, pe.Path)
			if tt.check != nil {
				tt.check(t, err)
			}

			w.tick()
			w.tick()
			_, _, errs, _ = w.seen()
			assert.Equal(t, 1, errs, "the same bad content is reported once")

			w.write(flowYAML(11))
			w.tick()
			n, last, errs, _ = w.seen()
			assert.Equal(t, 2, n, "a fixed file is applied")
			assert.Equal(t, flowSet(11), last)
			assert.Equal(t, 1, errs)
		})
	}
}

func TestFileSourceReportsRefusal(t *testing.T) {
	w := newWatch(t, "rules.json", `{"flow": [{"resource": "a", "threshold": 1}]}`)
	w.start()
	refused := errors.New("engine says no")
	w.mu.Lock()
	w.refuse = refused
	w.mu.Unlock()

	w.write(`{"flow": [{"resource": "a", "threshold": 2}]}`)
	w.tick()
	w.tick()
	n, _, errs, err := w.seen()
	assert.Equal(t, 1, n)
	require.Equal(t, 1, errs, "a refused set is reported once")
	require.ErrorIs(t, err, refused)
	assert.EqualError(t, err, w.path+": engine says no")
}

func TestFileSourceMissingFile(t *testing.T) {
	w := newWatch(t, "rules.yml", flowYAML(10))
	w.start()

	require.NoError(t, os.Remove(w.path))
	w.tick()
	w.tick()
	n, last, errs, err := w.seen()
	assert.Equal(t, 1, n)
	assert.Equal(t, flowSet(10), last, "the rules in force stay")
	require.Equal(t, 1, errs, "a missing file is reported once")
	require.ErrorIs(t, err, fs.ErrNotExist)
	assert.Contains(t, err.Error(), "rules: cannot read the rule file, the rules in force stay: stat "+w.path)

	w.write(flowYAML(10)) // back as it was: nothing new to apply
	w.tick()
	n, _, errs, _ = w.seen()
	assert.Equal(t, 1, n)
	assert.Equal(t, 1, errs)

	require.NoError(t, os.Remove(w.path))
	w.tick()
	w.write(flowYAML(12))
	w.tick()
	n, last, errs, _ = w.seen()
	assert.Equal(t, 2, n, "a new file is applied")
	assert.Equal(t, flowSet(12), last)
	assert.Equal(t, 2, errs, "the second disappearance is a new problem")
}

func TestFileSourceTrustsOldStamps(t *testing.T) {
	w := newWatch(t, "rules.yaml", flowYAML(10))
	old := time.Now().Add(-time.Hour)
	require.NoError(t, os.Chtimes(w.path, old, old))
	w.start()
	w.tick()

	// Same size and time, different content: an old stamp is trusted, so
	// the change is not seen (this is what a stamp is for)...
	w.write(flowYAML(20))
	require.NoError(t, os.Chtimes(w.path, old, old))
	w.tick()
	n, _, _, _ := w.seen()
	assert.Equal(t, 1, n)

	// ...until the time moves, as any real write does.
	newer := old.Add(time.Second)
	require.NoError(t, os.Chtimes(w.path, newer, newer))
	w.tick()
	n, last, _, _ := w.seen()
	assert.Equal(t, 2, n)
	assert.Equal(t, flowSet(20), last)
}

func TestFileSourceAtomicReplace(t *testing.T) {
	w := newWatch(t, "rules.yaml", flowYAML(10))
	w.start()
	tmp := w.path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(flowYAML(30)), 0o600))
	require.NoError(t, os.Rename(tmp, w.path))
	w.tick()
	n, last, errs, _ := w.seen()
	assert.Equal(t, 2, n)
	assert.Equal(t, flowSet(30), last)
	assert.Equal(t, 0, errs)
}

func TestFileSourceDefaultInterval(t *testing.T) {
	w := newWatch(t, "rules.yaml", flowYAML(10))
	for _, d := range []time.Duration{0, -time.Second} {
		src, err := NewFileSource(w.path, w.apply, WithPollInterval(d))
		require.NoError(t, err)
		assert.Equal(t, defaultPollInterval, src.interval, "WithPollInterval(%v)", d)
	}

	src, err := NewFileSource(w.path, w.apply, WithClock(w.clock), WithErrorHandler(w.report))
	require.NoError(t, err)
	defer src.Close()
	require.NoError(t, src.Start())
	w.parked()
	w.write(flowYAML(20))
	w.clock.Advance(defaultPollInterval - 1)
	n, _, _, _ := w.seen()
	assert.Equal(t, 1, n)
	w.clock.Advance(1)
	w.parked()
	n, _, _, _ = w.seen()
	assert.Equal(t, 2, n, "polled after one second")
}

func TestFileSourceDecodeLimits(t *testing.T) {
	content := flowYAML(1, 2, 3)
	small := newWatch(t, "rules.yaml", content, WithDecodeLimits(DecodeLimits{MaxBytes: len(content) - 1}))
	err := small.src.Start()
	require.ErrorContains(t, err, fmt.Sprintf("%s: rules: document is %d bytes, more than the limit of %d bytes; raise DecodeLimits.MaxBytes",
		small.path, len(content), len(content)-1))

	w := newWatch(t, "rules.yaml", content, WithDecodeLimits(DecodeLimits{MaxValues: 18}))
	w.start()
	_, last, _, _ := w.seen()
	assert.Equal(t, flowSet(1, 2, 3), last)

	w.write(flowYAML(1, 2, 3, 4)) // 23 values
	w.tick()
	n, _, errs, err := w.seen()
	assert.Equal(t, 1, n, "a file over the limits is not applied")
	require.Equal(t, 1, errs)
	assert.EqualError(t, err, w.path+": rules: document has more than 18 values at line 8 (a YAML alias counts its values at every use); "+
		"raise DecodeLimits.MaxValues (WithDecodeLimits for a FileSource) to read it")
}

func TestFileSourceLifecycle(t *testing.T) {
	t.Run("start fails on a bad first file and does not poll", func(t *testing.T) {
		for _, content := range []string{"", "flow: [", flowYAML(-1)} {
			w := newWatch(t, "rules.yaml", content)
			require.Error(t, w.src.Start())
			assert.Equal(t, 0, w.clock.Waiters())
			n, _, errs, _ := w.seen()
			assert.Equal(t, 0, n)
			assert.Equal(t, 0, errs, "Start returns the error instead of reporting it")
			require.NoError(t, w.src.Close())
		}
	})
	t.Run("start twice, start after close, close twice", func(t *testing.T) {
		w := newWatch(t, "rules.yaml", flowYAML(1))
		w.start()
		require.EqualError(t, w.src.Start(), "rules: file source already started")
		require.NoError(t, w.src.Close())
		assert.Equal(t, 0, w.clock.Waiters(), "Close stops the timer")
		require.NoError(t, w.src.Close())
		require.ErrorIs(t, w.src.Start(), ErrSourceClosed)
	})
	t.Run("close without start", func(t *testing.T) {
		w := newWatch(t, "rules.yaml", flowYAML(1))
		require.NoError(t, w.src.Close())
		require.ErrorIs(t, w.src.Start(), ErrSourceClosed)
	})
	t.Run("options", func(t *testing.T) {
		_, err := NewFileSource("rules.txt", func(Set) error { return nil })
		require.EqualError(t, err, `rules: cannot tell the format of "rules.txt": want a .json, .yaml or .yml file`)
		_, err = NewFileSource("rules.yaml", nil)
		require.EqualError(t, err, "rules: NewFileSource needs an apply function")
		_, err = NewFileSource("rules.txt", func(Set) error { return nil }, WithFormat(9))
		require.EqualError(t, err, "rules: unknown format Format(9)")

		w := newWatch(t, "rules.txt", `{"isolation": [{"resource": "a", "threshold": 3}]}`, WithFormat(JSON))
		w.start()
		_, last, _, _ := w.seen()
		assert.Equal(t, Set{Flow: []Flow{{Resource: "a", Metric: Concurrency, Threshold: 3}}}, last)
	})
}
