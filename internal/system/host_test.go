package system

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

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/sluicetest"
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
			clock := sluicetest.NewManualClock(0)
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
	clock := sluicetest.NewManualClock(0)
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

	// Burn CPU until the process's CPU time, as the source reads it, has
	// moved past the base reading: only then must the usage be positive.
	// (A wall-clock burn proves nothing on a busy host, where the burning
	// thread may not run at all, and CPU time advances in clock ticks.)
	base, err := h.cpuTime()
	require.NoError(t, err)
	x := 0.0
	for deadline := time.Now().Add(failsafe); ; {
		for i := 0; i < 100000; i++ {
			x += math.Sqrt(x + 1)
		}
		now, err := h.cpuTime()
		require.NoError(t, err)
		if now > base {
			break
		}
		require.Truef(t, time.Now().Before(deadline), "process CPU time did not advance in %v of burning", failsafe)
	}
	u, err := h.CPUUsage()
	require.NoError(t, err)
	assert.Greater(t, u, 0.0, "after burning CPU (x=%v)", x)
	assert.LessOrEqual(t, u, 1.0)
}

// failsafe bounds waits that only a bug can make long.
const failsafe = 30 * time.Second

// fakeSource is a Source whose readings a test sets.
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
func tick(t *testing.T, clock *sluicetest.ManualClock, d time.Duration) {
	t.Helper()
	clock.Advance(d)
	waitParked(t, clock)
}

func waitParked(t *testing.T, clock *sluicetest.ManualClock) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, clock.BlockUntil(ctx, 1))
}

func TestSampler(t *testing.T) {
	defer goleak.VerifyNone(t)
	clock := sluicetest.NewManualClock(int64(time.Hour))
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
