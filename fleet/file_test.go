package fleet_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/fleet"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

// A rule file followed by an engine on a manual clock, recording the
// failures told.
type fileRig struct {
	t     *testing.T
	clock *sluicetest.ManualClock
	path  string
	eng   *sluice.Engine
	m     *fleet.Member

	mu   sync.Mutex
	errs []error
}

const pollEvery = 500 * time.Millisecond

func newFileRig(t *testing.T, name, content string) *fileRig {
	t.Helper()
	r := &fileRig{t: t, clock: sluicetest.NewManualClock(0), path: filepath.Join(t.TempDir(), name)}
	if content != "" {
		r.write(content)
	}
	r.eng = sluice.New(sluice.WithClock(r.clock))
	t.Cleanup(func() { require.NoError(t, r.eng.Close()) })
	return r
}

// join follows the file every interval (0: the default) and waits until
// the follower waits on the clock.
func (r *fileRig) join(interval time.Duration) {
	r.t.Helper()
	m, err := fleet.Join(r.eng, fleet.Config{App: "local", Rules: fleet.RuleFile(r.path), CheckInterval: interval, OnError: r.report})
	require.NoError(r.t, err)
	r.m = m
	r.t.Cleanup(func() { require.NoError(r.t, m.Close()) })
	r.parked()
}

func (r *fileRig) report(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, err)
}

// told returns how many failures were told, and the last.
func (r *fileRig) told() (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.errs) == 0 {
		return 0, nil
	}
	return len(r.errs), r.errs[len(r.errs)-1]
}

func (r *fileRig) write(content string) {
	r.t.Helper()
	require.NoError(r.t, os.WriteFile(r.path, []byte(content), 0o600))
}

func (r *fileRig) parked() {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(r.t, r.clock.BlockUntil(ctx, 1), "the follower never waited on the clock")
}

// tick moves the clock one interval and waits until that check is done
// (the follower waits on the clock again only after it).
func (r *fileRig) tick() {
	r.t.Helper()
	r.clock.Advance(pollEvery)
	r.parked()
}

func flowSet(thresholds ...float64) rules.Set {
	var s rules.Set
	for i, th := range thresholds {
		s.Flow = append(s.Flow, rules.Flow{Resource: "r" + strconv.Itoa(i), Threshold: th})
	}
	return s
}

func flowYAML(thresholds ...float64) string {
	var b strings.Builder
	b.WriteString("flow:\n")
	for i, th := range thresholds {
		b.WriteString("  - resource: r" + strconv.Itoa(i) + "\n    threshold: " + strconv.FormatFloat(th, 'g', -1, 64) + "\n")
	}
	return b.String()
}

func TestRuleFileAppliesEdits(t *testing.T) {
	r := newFileRig(t, "rules.yaml", flowYAML(10))
	r.join(pollEvery)
	assert.Equal(t, flowSet(10), r.eng.Rules(), "Join loads the file at once")
	assert.Equal(t, int64(1), r.m.Status().Version)

	r.write(flowYAML(20)) // same size, written within the same clock tick
	r.clock.Advance(pollEvery - 1)
	assert.Equal(t, flowSet(10), r.eng.Rules(), "nothing is read before the interval has passed")
	r.clock.Advance(1)
	r.parked()
	assert.Equal(t, flowSet(20), r.eng.Rules(), "the edit is loaded at the next check")
	assert.Equal(t, int64(2), r.m.Status().Version)

	r.tick()
	r.write(flowYAML(20)) // rewritten unchanged
	r.tick()
	assert.Equal(t, int64(2), r.m.Status().Version, "unchanged content is no new version")

	r.write(flowYAML(20, 30))
	r.tick()
	assert.Equal(t, flowSet(20, 30), r.eng.Rules())
	st := r.m.Status()
	assert.Equal(t, int64(3), st.Version)
	assert.Zero(t, st.Failures)
	n, _ := r.told()
	assert.Zero(t, n)
}

func TestRuleFileKeepsRulesOnBadFiles(t *testing.T) {
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
			give:    "flow:\n  - {resource: api, threshold: 50}\n  - {resource: b, threshold: 1}\n  - {resource: c, threshold: -2}\n",
			wantErr: `rules: flow rule 2 (resource "c"): Threshold: must be a positive number, got -2`,
			check: func(t *testing.T, err error) {
				var re *rules.Error
				require.ErrorAs(t, err, &re)
				assert.Equal(t, 2, re.Index)
				assert.Equal(t, "Threshold", re.Field)
			},
		},
		{
			name:    "unknown field",
			give:    "flow:\n  - resource: a\n    thresold: 3\n",
			wantErr: `rules: flow rule 0 (resource "a"): unknown field "thresold" at line 3 (did you mean "threshold"?)`,
		},
		{
			name:    "half-written",
			give:    "",
			wantErr: "rules: empty document; write {} for a document with no rules",
		},
		{
			name:    "refused by the engine",
			give:    "flow:\n  - {resource: a, threshold: 1, cluster: {}}\n",
			wantErr: "WithCluster",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newFileRig(t, "rules.yaml", flowYAML(10))
			r.join(pollEvery)

			r.write(tt.give)
			r.tick()
			st := r.m.Status()
			assert.Equal(t, flowSet(10), r.eng.Rules(), "nothing is loaded")
			assert.Equal(t, int64(1), st.Version)
			assert.Equal(t, int64(2), st.Refused)
			require.Error(t, st.RefusedErr)
			if tt.name == "refused by the engine" {
				assert.Contains(t, st.RefusedErr.Error(), tt.wantErr)
			} else {
				require.EqualError(t, st.RefusedErr, r.path+": "+tt.wantErr)
			}
			var pe *rules.PathError
			require.ErrorAs(t, st.RefusedErr, &pe)
			assert.Equal(t, r.path, pe.Path)
			if tt.check != nil {
				tt.check(t, st.RefusedErr)
			}
			n, _ := r.told()
			assert.Zero(t, n, "a refused version is no failure of the store")

			r.tick()
			r.tick()
			assert.Equal(t, int64(2), r.m.Status().Refused, "the same bad content is not loaded again")

			r.write(flowYAML(11))
			r.tick()
			st = r.m.Status()
			assert.Equal(t, flowSet(11), r.eng.Rules(), "a fixed file is loaded")
			assert.Equal(t, int64(3), st.Version)
			assert.Zero(t, st.Refused)
			assert.NoError(t, st.RefusedErr)
		})
	}
}

// TestRuleFileIsolationAsConcurrency: a JSON file is read as JSON, and an
// isolation rule is loaded as a concurrency flow rule after the flow rules.
func TestRuleFileIsolationAsConcurrency(t *testing.T) {
	r := newFileRig(t, "rules.json", `{"flow": [{"resource": "api", "threshold": 3}], "isolation": [{"resource": "db", "threshold": 2}]}`)
	r.join(pollEvery)
	assert.Equal(t, []rules.Flow{{Resource: "api", Threshold: 3}, {Metric: rules.Concurrency, Resource: "db", Threshold: 2}}, r.eng.Rules().Flow)
}

func TestRuleFileMissingFile(t *testing.T) {
	r := newFileRig(t, "rules.yml", flowYAML(10))
	r.join(pollEvery)

	require.NoError(t, os.Remove(r.path))
	r.tick()
	r.tick()
	assert.Equal(t, flowSet(10), r.eng.Rules(), "the rules in force stay")
	n, err := r.told()
	require.Equal(t, 1, n, "a missing file is told once")
	require.ErrorIs(t, err, fs.ErrNotExist)
	assert.Contains(t, err.Error(), "cannot read the rule file, the rules in force stay: stat "+r.path)
	st := r.m.Status()
	assert.Equal(t, int64(2), st.Failures, "and counted at every check")
	require.ErrorIs(t, st.Err, fs.ErrNotExist)

	r.write(flowYAML(10)) // back as it was: nothing new to load
	r.tick()
	st = r.m.Status()
	assert.Equal(t, int64(1), st.Version)
	assert.NoError(t, st.Err)

	require.NoError(t, os.Remove(r.path))
	r.tick()
	r.write(flowYAML(12))
	r.tick()
	assert.Equal(t, flowSet(12), r.eng.Rules(), "a new file is loaded")
	n, _ = r.told()
	assert.Equal(t, 2, n, "the second disappearance is told again")
}

func TestRuleFileTrustsOldStamps(t *testing.T) {
	r := newFileRig(t, "rules.yaml", flowYAML(10))
	old := time.Now().Add(-time.Hour)
	require.NoError(t, os.Chtimes(r.path, old, old))
	r.join(pollEvery)
	r.tick()

	// Same size and time, different content: an old stamp is trusted, so
	// the change is not seen (this is what a stamp is for)...
	r.write(flowYAML(20))
	require.NoError(t, os.Chtimes(r.path, old, old))
	r.tick()
	assert.Equal(t, flowSet(10), r.eng.Rules())

	// ...until the time moves, as any real write does.
	newer := old.Add(time.Second)
	require.NoError(t, os.Chtimes(r.path, newer, newer))
	r.tick()
	assert.Equal(t, flowSet(20), r.eng.Rules())
}

func TestRuleFileAtomicReplace(t *testing.T) {
	r := newFileRig(t, "rules.yaml", flowYAML(10))
	r.join(pollEvery)
	tmp := r.path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(flowYAML(30)), 0o600))
	require.NoError(t, os.Rename(tmp, r.path))
	r.tick()
	assert.Equal(t, flowSet(30), r.eng.Rules())
}

// TestRuleFileDefaultInterval: a rule file is looked at every second
// unless told otherwise.
func TestRuleFileDefaultInterval(t *testing.T) {
	r := newFileRig(t, "rules.yaml", flowYAML(10))
	r.join(0)
	r.write(flowYAML(20))
	r.clock.Advance(time.Second - 1)
	assert.Equal(t, flowSet(10), r.eng.Rules())
	r.clock.Advance(1)
	r.parked()
	assert.Equal(t, flowSet(20), r.eng.Rules(), "checked after one second")
}

// TestRuleFileTooLarge: a file over the decoder's default limit is read
// no further than the limit and refused, saying so.
func TestRuleFileTooLarge(t *testing.T) {
	r := newFileRig(t, "rules.yaml", flowYAML(10))
	r.join(pollEvery)
	r.write(flowYAML(20) + "#" + strings.Repeat("x", 5<<20) + "\n")
	r.tick()
	st := r.m.Status()
	require.Error(t, st.RefusedErr)
	assert.Contains(t, st.RefusedErr.Error(), "more than the limit of 4194304 bytes")
	assert.Equal(t, flowSet(10), r.eng.Rules())
}

func TestRuleFileLifecycle(t *testing.T) {
	t.Run("a bad first file leaves the rules in force and is retried when fixed", func(t *testing.T) {
		r := newFileRig(t, "rules.json", `{"flow": [{"resource": "a", "threshold": "x"}]}`)
		before := rules.Set{Flow: []rules.Flow{{Resource: "keep", Threshold: 1}}}
		require.NoError(t, r.eng.LoadRules(before))
		r.join(pollEvery)
		st := r.m.Status()
		require.EqualError(t, st.RefusedErr, r.path+`: rules: flow rule 0 (resource "a"): Threshold: want a number, got string "x" at line 1`)
		assert.Equal(t, int64(0), st.Version, "a program that must start with its file's rules checks Version")
		assert.Equal(t, before, r.eng.Rules())
		r.write(`{"flow": [{"resource": "a", "threshold": 2}]}`)
		r.tick()
		assert.Equal(t, rules.Set{Flow: []rules.Flow{{Resource: "a", Threshold: 2}}}, r.eng.Rules())
	})
	t.Run("a missing first file", func(t *testing.T) {
		r := newFileRig(t, "missing.yaml", "")
		r.join(pollEvery)
		st := r.m.Status()
		require.ErrorIs(t, st.Err, os.ErrNotExist)
		assert.Equal(t, int64(1), st.Failures)
	})
	t.Run("close twice; close stops the timer", func(t *testing.T) {
		r := newFileRig(t, "rules.yaml", flowYAML(1))
		r.join(pollEvery)
		require.NoError(t, r.m.Close())
		assert.Equal(t, 0, r.clock.Waiters(), "Close stops the timer")
		require.NoError(t, r.m.Close())
		assert.Equal(t, int64(1), r.m.Status().Version, "Status after Close")
	})
	t.Run("an extension that names no format", func(t *testing.T) {
		eng := sluice.New()
		defer eng.Close()
		_, err := fleet.Join(eng, fleet.Config{App: "local", Rules: fleet.RuleFile("rules.txt")})
		require.EqualError(t, err, `fleet: Join: Config.Rules: rules: cannot tell the format of "rules.txt": want a .json, .yaml or .yml file`)
	})
	t.Run("the store refuses saves", func(t *testing.T) {
		_, err := fleet.RuleFile("rules.yaml").Save(context.Background(), "local", 0, cluster.RuleVersion{Doc: []byte("{}")})
		require.ErrorContains(t, err, "edited in place")
	})
}
