package stat

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-go/sluice/core"
)

// writeFiles creates files (path relative to dir → content) under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(dir, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(content), 0o644))
	}
}

func TestCgroupCPUQuota(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string]string // under the cgroup root
		proc    string            // content of the fake /proc/self/cgroup; "" = missing
		want    float64
		wantOK  bool
		wantErr string
	}{
		{name: "no cgroup fs"},
		{
			name:   "v2 quota at root",
			files:  map[string]string{"cgroup.controllers": "cpu io", "cpu.max": "50000 100000\n"},
			want:   0.5,
			wantOK: true,
		},
		{
			name:  "v2 unlimited",
			files: map[string]string{"cgroup.controllers": "cpu", "cpu.max": "max 100000\n"},
		},
		{
			name:   "v2 quota without period uses the default period",
			files:  map[string]string{"cgroup.controllers": "cpu", "cpu.max": "250000"},
			want:   2.5,
			wantOK: true,
		},
		{
			name: "v2 nested: the smallest quota on the path wins",
			files: map[string]string{
				"cgroup.controllers":     "cpu",
				"cpu.max":                "max 100000",
				"kubepods/cpu.max":       "150000 100000",
				"kubepods/pod1/cpu.max":  "300000 100000",
				"kubepods/other/cpu.max": "10000 100000",
			},
			proc:   "0::/kubepods/pod1\n",
			want:   1.5,
			wantOK: true,
		},
		{
			name:   "v2 path missing under root (container without namespace)",
			files:  map[string]string{"cgroup.controllers": "cpu", "cpu.max": "200000 100000"},
			proc:   "0::/system.slice/docker-abc.scope\n",
			want:   2,
			wantOK: true,
		},
		{
			name:    "v2 malformed",
			files:   map[string]string{"cgroup.controllers": "cpu", "cpu.max": "lots 100000"},
			wantErr: "malformed quota",
		},
		{
			name:    "v2 zero period",
			files:   map[string]string{"cgroup.controllers": "cpu", "cpu.max": "50000 0"},
			wantErr: "malformed quota",
		},
		{
			name:   "v1 quota",
			files:  map[string]string{"cpu,cpuacct/cpu.cfs_quota_us": "150000\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"},
			proc:   "4:memory:/x\n3:cpu,cpuacct:/\n0::/\n",
			want:   1.5,
			wantOK: true,
		},
		{
			name:  "v1 unlimited",
			files: map[string]string{"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"},
		},
		{
			name: "v1 nested with host path",
			files: map[string]string{
				"cpu/cpu.cfs_quota_us":            "-1",
				"cpu/cpu.cfs_period_us":           "100000",
				"cpu/docker/c1/cpu.cfs_quota_us":  "25000",
				"cpu/docker/c1/cpu.cfs_period_us": "100000",
			},
			proc:   "2:cpuacct:/\n1:cpu:/docker/c1\n0::/\n",
			want:   0.25,
			wantOK: true,
		},
		{
			name:    "v1 quota without period",
			files:   map[string]string{"cpu/cpu.cfs_quota_us": "50000"},
			wantErr: "quota without period",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			writeFiles(t, root, tt.files)
			proc := filepath.Join(t.TempDir(), "cgroup")
			if tt.proc != "" {
				require.NoError(t, os.WriteFile(proc, []byte(tt.proc), 0o644))
			}
			got, ok, err := cgroupCPUQuota(root, proc)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.wantOK, ok)
			assert.Equal(t, tt.want, got)
		})
	}
}

// fakeHost returns a HostSource on a fake cgroup tree whose process CPU time
// is *cpu.
func fakeHost(t *testing.T, files map[string]string, numCPU int, clock core.Clock, cpu *time.Duration) *HostSource {
	t.Helper()
	root := t.TempDir()
	writeFiles(t, root, files)
	h := newHostSource(HostConfig{CgroupRoot: root, ProcCgroup: filepath.Join(root, "none"), NumCPU: numCPU, Clock: clock})
	h.cpuTime = func() (time.Duration, error) { return *cpu, nil }
	h.prime()
	return h
}

func TestHostSourceCPUUsage(t *testing.T) {
	halfCPU := map[string]string{"cgroup.controllers": "cpu", "cpu.max": "50000 100000"}
	tests := []struct {
		name   string
		files  map[string]string
		numCPU int
		used   time.Duration // CPU time burnt during one second of wall time
		want   float64
		limit  float64
	}{
		// The case: cpu.max 50000 100000 on a 2-CPU host. A quarter
		// of a CPU is half of what the process may use.
		{"v2 quota half a cpu", halfCPU, 2, 250 * time.Millisecond, 0.5, 0.5},
		{"v2 quota saturated", halfCPU, 2, 500 * time.Millisecond, 1, 0.5},
		{"v2 quota over (capped)", halfCPU, 2, 700 * time.Millisecond, 1, 0.5},
		{"no quota: relative to cpu count", nil, 2, 250 * time.Millisecond, 0.125, 2},
		{"v2 unlimited", map[string]string{"cgroup.controllers": "", "cpu.max": "max 100000"}, 4, time.Second, 0.25, 4},
		{"quota above cpu count is capped", map[string]string{"cgroup.controllers": "", "cpu.max": "800000 100000"}, 2, time.Second, 0.5, 2},
		{"v1 quota", map[string]string{"cpu/cpu.cfs_quota_us": "150000", "cpu/cpu.cfs_period_us": "100000"}, 4, 750 * time.Millisecond, 0.5, 1.5},
		{"idle", halfCPU, 2, 0, 0, 0.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := core.NewManualClock(0)
			cpu := 3 * time.Second // CPU time before the base reading
			h := fakeHost(t, tt.files, tt.numCPU, clock, &cpu)
			limit, err := h.CPULimit()
			require.NoError(t, err)
			assert.Equal(t, tt.limit, limit)

			clock.Advance(time.Second)
			cpu += tt.used
			got, err := h.CPUUsage()
			require.NoError(t, err)
			assert.InDelta(t, tt.want, got, 1e-12)

			// The next reading covers only the time since this one.
			clock.Advance(2 * time.Second)
			cpu += tt.used // half the rate
			got, err = h.CPUUsage()
			require.NoError(t, err)
			assert.InDelta(t, min(tt.used.Seconds()/2/limit, 1), got, 1e-12)
		})
	}
}

func TestHostSourceCPUUsageEdges(t *testing.T) {
	clock := core.NewManualClock(0)
	cpu := time.Duration(0)
	h := fakeHost(t, nil, 1, clock, &cpu)

	// No time passed since the base reading: no reading yet.
	got, err := h.CPUUsage()
	require.NoError(t, err)
	assert.True(t, math.IsNaN(got), "CPUUsage() = %v, want NaN", got)

	clock.Advance(time.Second)
	cpu = 600 * time.Millisecond
	got, err = h.CPUUsage()
	require.NoError(t, err)
	assert.InDelta(t, 0.6, got, 1e-12)
	// Again without time passing: the last reading.
	got, err = h.CPUUsage()
	require.NoError(t, err)
	assert.InDelta(t, 0.6, got, 1e-12)

	// CPU time failing, then a source whose base reading failed.
	boom := errors.New("boom")
	h.cpuTime = func() (time.Duration, error) { return 0, boom }
	_, err = h.CPUUsage()
	require.ErrorIs(t, err, boom)

	h2 := newHostSource(HostConfig{CgroupRoot: t.TempDir(), NumCPU: 1, Clock: clock})
	h2.cpuTime = func() (time.Duration, error) { return 0, boom }
	h2.prime()
	h2.cpuTime = func() (time.Duration, error) { return cpu, nil }
	got, err = h2.CPUUsage() // primes
	require.NoError(t, err)
	assert.True(t, math.IsNaN(got))
	clock.Advance(time.Second)
	cpu += 100 * time.Millisecond
	got, err = h2.CPUUsage()
	require.NoError(t, err)
	assert.InDelta(t, 0.1, got, 1e-12)

	// A malformed cgroup file is an error.
	bad := fakeHost(t, map[string]string{"cgroup.controllers": "", "cpu.max": "1 2 3"}, 1, clock, &cpu)
	_, err = bad.CPUUsage()
	require.ErrorContains(t, err, "malformed")
}

// TestHostSourceReal reads the real process through gopsutil.
func TestHostSourceReal(t *testing.T) {
	h := NewHostSource(HostConfig{})
	l, err := h.Load1()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, l, 0.0)
	m, err := h.Memory()
	require.NoError(t, err)
	assert.Greater(t, m, uint64(1<<20))
	limit, err := h.CPULimit()
	require.NoError(t, err)
	assert.Greater(t, limit, 0.0)
	assert.LessOrEqual(t, limit, float64(h.numCPU))

	// Burn some CPU so the reading is a real one.
	x := 0.0
	for start := time.Now(); time.Since(start) < 20*time.Millisecond; {
		x += math.Sqrt(x + 1)
	}
	u, err := h.CPUUsage()
	require.NoError(t, err)
	assert.Greater(t, u, 0.0, "after burning CPU (x=%v)", x)
	assert.LessOrEqual(t, u, 1.0)
}

// fakeSource is a SystemSource whose readings a test sets.
type fakeSource struct {
	mu      sync.Mutex
	load    float64
	cpu     float64
	mem     uint64
	loadErr error
	cpuErr  error
	calls   int
}

func (f *fakeSource) set(fn func(f *fakeSource)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeSource) Load1() (float64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return f.load, f.loadErr
}

func (f *fakeSource) CPUUsage() (float64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cpu, f.cpuErr
}

func (f *fakeSource) Memory() (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mem, nil
}

// tick moves the clock one interval and waits until the sampler has taken
// its sample and parked on its next timer.
func tick(t *testing.T, clock *core.ManualClock, d time.Duration) {
	t.Helper()
	clock.Advance(d)
	waitParked(t, clock)
}

func waitParked(t *testing.T, clock *core.ManualClock) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, clock.BlockUntil(ctx, 1))
}

func TestSampler(t *testing.T) {
	defer goleak.VerifyNone(t)
	clock := core.NewManualClock(int64(time.Hour))
	src := &fakeSource{load: 1.5, cpu: 0.25, mem: 4096}
	var (
		mu   sync.Mutex
		errs []error
	)
	s := NewSampler(SamplerConfig{Source: src, Clock: clock, Interval: 500 * time.Millisecond, OnError: func(err error) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, err)
	}})
	assert.Equal(t, 500*time.Millisecond, s.Interval())

	// Nothing before the first sample.
	v, _ := s.Load1()
	assert.True(t, math.IsNaN(v))
	snap := s.Snapshot()
	assert.Equal(t, time.Duration(-1), snap.Load1Age)
	assert.Equal(t, time.Duration(-1), snap.CPUUsageAge)
	assert.Equal(t, time.Duration(-1), snap.MemoryAge)
	assert.False(t, s.Running())

	s.Start()
	s.Start() // idempotent
	assert.True(t, s.Running())
	waitParked(t, clock) // the first sample is taken at once
	v, at := s.Load1()
	assert.Equal(t, 1.5, v)
	assert.Equal(t, int64(time.Hour), at)
	v, at = s.CPUUsage()
	assert.Equal(t, 0.25, v)
	assert.Equal(t, int64(time.Hour), at)

	// A new value each interval.
	src.set(func(f *fakeSource) { f.load, f.cpu = 3, 0.75 })
	tick(t, clock, 500*time.Millisecond)
	v, _ = s.Load1()
	assert.Equal(t, 3.0, v)
	v, at = s.CPUUsage()
	assert.Equal(t, 0.75, v)
	assert.Equal(t, int64(time.Hour+500*time.Millisecond), at)

	// Failing readings keep the last good value, which ages; the error is
	// reported once per streak.
	boom := errors.New("no /proc")
	src.set(func(f *fakeSource) { f.loadErr, f.load, f.cpu = boom, 99, -0.5 })
	tick(t, clock, 500*time.Millisecond)
	tick(t, clock, 500*time.Millisecond)
	tick(t, clock, 500*time.Millisecond)
	snap = s.Snapshot()
	assert.Equal(t, 3.0, snap.Load1)
	assert.Equal(t, 1500*time.Millisecond, snap.Load1Age)
	assert.Equal(t, 0.75, snap.CPUUsage)
	assert.Equal(t, 1500*time.Millisecond, snap.CPUUsageAge)
	assert.Equal(t, uint64(4096), snap.Memory)
	assert.Equal(t, time.Duration(0), snap.MemoryAge)
	mu.Lock()
	require.Len(t, errs, 2)
	assert.ErrorIs(t, errs[0], boom)
	assert.EqualError(t, errs[0], "stat: sampling load1: no /proc")
	assert.EqualError(t, errs[1], "stat: sampling cpu usage: reading -0.5 out of range")
	mu.Unlock()

	// Recovery, then a new streak is reported again. CPU above 1 is capped.
	src.set(func(f *fakeSource) { f.loadErr, f.load, f.cpu = nil, 2, 1.2 })
	tick(t, clock, 500*time.Millisecond)
	snap = s.Snapshot()
	assert.Equal(t, 2.0, snap.Load1)
	assert.Equal(t, time.Duration(0), snap.Load1Age)
	assert.Equal(t, 1.0, snap.CPUUsage)
	src.set(func(f *fakeSource) { f.load = math.NaN() })
	tick(t, clock, 500*time.Millisecond)
	mu.Lock()
	require.Len(t, errs, 3)
	assert.EqualError(t, errs[2], "stat: sampling load1: reading NaN out of range")
	mu.Unlock()

	// A NaN CPU reading means "none yet": no error, the last value stays.
	src.set(func(f *fakeSource) { f.load, f.cpu = 2, math.NaN() })
	tick(t, clock, 500*time.Millisecond)
	v, at = s.CPUUsage()
	assert.Equal(t, 1.0, v)
	assert.Equal(t, int64(time.Hour+3*time.Second), at)
	mu.Lock()
	assert.Len(t, errs, 3)
	mu.Unlock()

	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
	assert.False(t, s.Running())
	assert.Equal(t, 0, clock.Waiters(), "the sampler's timer is stopped")
	src.mu.Lock()
	calls := src.calls
	src.mu.Unlock()
	clock.Advance(10 * time.Second)
	src.mu.Lock()
	assert.Equal(t, calls, src.calls, "no sample after Close")
	src.mu.Unlock()
	s.Start() // a closed sampler stays closed
	assert.False(t, s.Running())
}

func TestSamplerCloseWithoutStart(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := NewSampler(SamplerConfig{Source: &fakeSource{}})
	require.NoError(t, s.Close())
	s.Start()
	assert.False(t, s.Running())
}

func TestSamplerDefaults(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := NewSampler(SamplerConfig{})
	assert.Equal(t, DefaultSampleInterval, s.Interval())
	s.Start() // a real HostSource on the real clock
	require.NoError(t, s.Close())
	s.mu.Lock()
	_, ok := s.source.(*HostSource)
	s.mu.Unlock()
	assert.True(t, ok)
}

func TestNodeSumBefore(t *testing.T) {
	n := NewNode()
	bw := int64(BucketWidth)
	for i := int64(0); i < 12; i++ {
		n.AddPass(i*bw+1, i+1) // bucket i gets i+1
	}
	now := 11*bw + 5
	// Window at bucket 11 holds buckets 2..11 (3+...+12 = 75); before the
	// current one: 3+...+11 = 63.
	assert.Equal(t, uint64(75), n.Sum(now, Pass))
	assert.Equal(t, uint64(63), n.SumBefore(now, Pass))
	assert.Equal(t, uint64(12), n.Bucket(now, Pass))
	// In a bucket nobody has written yet, the whole window is "before".
	assert.Equal(t, uint64(3+4+5+6+7+8+9+10+11+12)-3, n.SumBefore(12*bw, Pass))
}

// TestWindowCache compares the cache with full scans of the window while
// time moves in uneven steps and counts land in every bucket.
func TestWindowCache(t *testing.T) {
	n := NewNode()
	w := NewWindowCache(n)
	now := int64(time.Hour)
	steps := []time.Duration{0, 30 * time.Millisecond, 70 * time.Millisecond, 5 * time.Millisecond, 250 * time.Millisecond, time.Second, 1100 * time.Millisecond}
	for i := 0; i < 100; i++ {
		now += int64(steps[i%len(steps)])
		n.AddPass(now, int64(i%5+1))
		n.AddComplete(now, int64(i)*int64(time.Millisecond), int64(i%3+1), false)
		for k := 0; k < 2; k++ { // a cold read (fill) and a warm one
			p, c, r := w.Sums(now)
			require.Equal(t, n.Sum(now, Pass), p, "step %d pass", i)
			require.Equal(t, n.Sum(now, Complete), c, "step %d complete", i)
			require.Equal(t, n.Sum(now, RT), r, "step %d rt", i)
		}
	}
	// A reader with an older clock reading than the cached bucket computes
	// its own sums.
	p, _, _ := w.Sums(now - int64(300*time.Millisecond))
	assert.Equal(t, n.Sum(now-int64(300*time.Millisecond), Pass), p)
}

func TestNodeRecentMinRT(t *testing.T) {
	sec := int64(time.Second)
	ms := int64(time.Millisecond)
	type done struct {
		at, rt int64 // nanoseconds
	}
	base := 100 * sec // a whole second: the memory spans [91 s, 101 s) at 100.x s
	tests := []struct {
		name   string
		give   []done
		now    int64
		want   int64 // µs
		wantOK bool
	}{
		{name: "nothing completed", now: base},
		{
			name: "current bucket",
			give: []done{{base + 10*ms, 7 * ms}, {base + 20*ms, 5 * ms}},
			now:  base + 50*ms, want: 5000, wantOK: true,
		},
		{
			name: "older than the one-second window, from the minute window",
			give: []done{{base - 8*sec, 5 * ms}, {base, 40 * ms}},
			now:  base + 500*ms, want: 5000, wantOK: true,
		},
		{
			name: "first second of the memory",
			give: []done{{base - 9*sec, 5 * ms}, {base, 40 * ms}},
			now:  base + 999*ms, want: 5000, wantOK: true,
		},
		{
			name: "left the memory",
			give: []done{{base - 9*sec, 5 * ms}, {base + sec, 40 * ms}},
			now:  base + sec, want: 40000, wantOK: true,
		},
		{
			name: "unretired one-second bucket still counts",
			// Only one add, 3 s ago: its 100 ms slot was never reset, so the
			// value never moved to the minute window.
			give: []done{{base - 3*sec, 9 * ms}},
			now:  base, want: 9000, wantOK: true,
		},
		{
			name: "unretired and too old",
			give: []done{{base - 10*sec, 9 * ms}},
			now:  base,
		},
		{
			name: "sub-millisecond",
			give: []done{{base, 1500}, {base + 300*ms, 2 * ms}},
			now:  base + 400*ms, want: 1, wantOK: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := NewNode()
			for _, d := range tt.give {
				n.AddPass(d.at, 1)
				n.AddComplete(d.at, d.rt, 1, false)
			}
			got, ok := n.RecentMinRT(tt.now)
			require.Equal(t, tt.wantOK, ok, "RecentMinRT ok")
			assert.Equal(t, tt.want, got, "RecentMinRT(%v)", time.Duration(tt.now))
			mc, rt, ok := NewWindowCache(n).Best(tt.now)
			require.Equal(t, tt.wantOK, ok, "Best ok")
			assert.Equal(t, uint64(tt.want), rt, "Best minRT")
			assert.Equal(t, uint64(n.MaxCompletePerSecond(tt.now))/SecondBuckets, mc, "Best maxComplete")
		})
	}
}

// TestWindowCacheBest compares Best with full scans while time moves in
// uneven steps, RTs rise (as under a growing queue) and fall, and counts
// land in every bucket.
func TestWindowCacheBest(t *testing.T) {
	n := NewNode()
	w := NewWindowCache(n)
	now := int64(time.Hour)
	steps := []time.Duration{0, 30 * time.Millisecond, 70 * time.Millisecond, 5 * time.Millisecond, 250 * time.Millisecond, time.Second, 1100 * time.Millisecond, 3 * time.Second}
	for i := 0; i < 300; i++ {
		now += int64(steps[i%len(steps)])
		rt := int64(5+(i*7)%60) * int64(time.Millisecond)
		if i > 150 {
			rt = int64(200-i%40) * int64(time.Millisecond)
		}
		n.AddPass(now, int64(i%5+1))
		n.AddComplete(now, rt, int64(i%3+1), false)
		for k := 0; k < 2; k++ { // a cold read (fill) and a warm one
			mc, minRT, ok := w.Best(now)
			wantRT, wantOK := n.RecentMinRT(now)
			require.Equal(t, wantOK, ok, "step %d", i)
			require.Equal(t, uint64(wantRT), minRT, "step %d minRT", i)
			require.Equal(t, uint64(n.MaxCompletePerSecond(now))/SecondBuckets, mc, "step %d maxComplete", i)
		}
	}
	// A reader with an older clock reading than the cached bucket computes
	// its own figures.
	old := now - int64(300*time.Millisecond)
	mc, _, _ := w.Best(old)
	assert.Equal(t, uint64(n.MaxCompletePerSecond(old))/SecondBuckets, mc)
	// Quiet for longer than the memory: nothing left.
	_, _, ok := w.Best(now + int64(MinRTMemory) + int64(time.Second))
	assert.False(t, ok)
}
