package system

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shirou/gopsutil/v3/load"
	"github.com/shirou/gopsutil/v3/process"

	"github.com/sluice-go/sluice/internal/clock"
	"github.com/sluice-go/sluice/internal/core"
)

// Source reads process-wide metrics for system adaptive protection.
// A Sampler calls it from its own goroutine, never on the request path.
//
// Implementations need not be safe for concurrent use unless they are shared
// between samplers. Tests implement it to inject CPU and load values.
type Source interface {
	// Load1 returns the host's one-minute load average.
	Load1() (float64, error)
	// CPUUsage returns the process's CPU usage since the previous call, as a
	// ratio in [0, 1] of the CPU it may use. It may return NaN (and no error)
	// when it has no reading yet.
	CPUUsage() (float64, error)
	// Memory returns the process's resident set size in bytes.
	Memory() (uint64, error)
}

// Default locations of the cgroup file system and of the process's cgroup
// membership.
const (
	DefaultCgroupRoot = "/sys/fs/cgroup"
	DefaultProcCgroup = "/proc/self/cgroup"
)

// HostConfig configures a HostSource. Its zero value reads the real host.
type HostConfig struct {
	// CgroupRoot is where the cgroup file system is mounted. Empty means
	// DefaultCgroupRoot. Tests point it at a directory of fake files.
	CgroupRoot string
	// ProcCgroup is the file listing the process's cgroups (the format of
	// /proc/self/cgroup). Empty means DefaultProcCgroup. When it cannot be
	// read, the process is taken to be in CgroupRoot's own cgroup, which is
	// the case inside a container with a cgroup namespace.
	ProcCgroup string
	// NumCPU is the number of CPUs of the host the process may run on. Zero
	// means runtime.NumCPU() (which honours the CPU affinity mask).
	NumCPU int
	// Clock measures the wall time CPU usage is divided by. Nil means
	// clock.System(). It must advance in real time: the CPU time it is
	// compared with does.
	Clock core.Clock
}

// HostSource is the Source of the real process, built on gopsutil:
// load1 from the host, CPU time and resident memory of this process.
//
// CPU usage is container-aware. When a cgroup CPU quota applies to the
// process (cgroup v2 cpu.max, or v1 cpu.cfs_quota_us over cpu.cfs_period_us,
// on the process's cgroup or any ancestor; the smallest wins), usage is
// relative to that quota, capped at the number of CPUs: a process limited to
// half a CPU that burns a quarter of a CPU reports 0.5. Otherwise it is
// relative to NumCPU. The quota is read again at every sample, so a resized
// container is followed.
//
// A HostSource is safe for concurrent use.
type HostSource struct {
	root       string
	procCgroup string
	numCPU     int
	clock      core.Clock

	// Readers of the process and host; tests replace them.
	cpuTime func() (time.Duration, error)
	loadAvg func() (float64, error)
	rss     func() (uint64, error)

	mu      sync.Mutex
	primed  bool
	lastCPU time.Duration
	lastAt  int64
	last    float64
}

var _ Source = (*HostSource)(nil)

// NewHostSource returns a source for the current process. It reads the
// process's CPU time once, as the base of the first CPUUsage reading.
func NewHostSource(cfg HostConfig) *HostSource {
	h := newHostSource(cfg)
	h.prime()
	return h
}

func newHostSource(cfg HostConfig) *HostSource {
	h := &HostSource{
		root:       cfg.CgroupRoot,
		procCgroup: cfg.ProcCgroup,
		numCPU:     cfg.NumCPU,
		clock:      cfg.Clock,
		last:       math.NaN(),
	}
	if h.root == "" {
		h.root = DefaultCgroupRoot
	}
	if h.procCgroup == "" {
		h.procCgroup = DefaultProcCgroup
	}
	if h.numCPU <= 0 {
		h.numCPU = runtime.NumCPU()
	}
	if h.clock == nil {
		h.clock = clock.System()
	}
	var (
		once sync.Once
		proc *process.Process
		perr error
	)
	self := func() (*process.Process, error) {
		once.Do(func() { proc, perr = process.NewProcess(int32(os.Getpid())) })
		return proc, perr
	}
	h.cpuTime = func() (time.Duration, error) {
		p, err := self()
		if err != nil {
			return 0, err
		}
		t, err := p.Times()
		if err != nil {
			return 0, err
		}
		return time.Duration((t.User + t.System) * float64(time.Second)), nil
	}
	h.loadAvg = func() (float64, error) {
		a, err := load.Avg()
		if err != nil {
			return 0, err
		}
		return a.Load1, nil
	}
	h.rss = func() (uint64, error) {
		p, err := self()
		if err != nil {
			return 0, err
		}
		m, err := p.MemoryInfo()
		if err != nil {
			return 0, err
		}
		return m.RSS, nil
	}
	return h
}

// prime takes the base reading of CPU time; a failure leaves the source
// unprimed, and the next CPUUsage call primes it instead.
func (h *HostSource) prime() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t, err := h.cpuTime(); err == nil {
		h.primed, h.lastCPU, h.lastAt = true, t, h.clock.Nanotime()
	}
}

// Load1 returns the host's one-minute load average. Load is not
// container-aware: it counts the runnable tasks of the whole host.
func (h *HostSource) Load1() (float64, error) { return h.loadAvg() }

// Memory returns the process's resident set size in bytes.
func (h *HostSource) Memory() (uint64, error) { return h.rss() }

// CPUUsage returns the CPU the process used since the previous call (the
// first call: since NewHostSource), as a ratio in [0, 1] of CPULimit. It
// returns NaN when no time has passed since the base reading was taken.
func (h *HostSource) CPUUsage() (float64, error) {
	limit, err := h.CPULimit()
	if err != nil {
		return 0, err
	}
	t, err := h.cpuTime()
	if err != nil {
		return 0, fmt.Errorf("stat: process cpu time: %w", err)
	}
	now := h.clock.Nanotime()
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.primed {
		h.primed, h.lastCPU, h.lastAt = true, t, now
		return math.NaN(), nil
	}
	wall := now - h.lastAt
	if wall <= 0 {
		return h.last, nil
	}
	u := float64(t-h.lastCPU) / (float64(wall) * limit)
	h.lastCPU, h.lastAt = t, now
	h.last = min(max(u, 0), 1)
	return h.last, nil
}

// CPULimit returns how many CPUs' worth of time the process may use: its
// cgroup CPU quota when one applies and is below the number of CPUs,
// otherwise the number of CPUs. A missing cgroup file means no quota; a
// malformed one is an error.
func (h *HostSource) CPULimit() (float64, error) {
	q, ok, err := cgroupCPUQuota(h.root, h.procCgroup)
	if err != nil {
		return 0, err
	}
	n := float64(h.numCPU)
	if ok && q < n {
		return q, nil
	}
	return n, nil
}

// cgroupCPUQuota returns the CPU quota (in CPUs) that applies to the process
// under root, and false when none does. It detects cgroup v2 (a unified
// hierarchy: root/cgroup.controllers exists) and otherwise reads the v1 cpu
// controller's hierarchy.
func cgroupCPUQuota(root, procCgroup string) (float64, bool, error) {
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		rel := cgroupPath(procCgroup, func(_ int, ctrls string) bool { return ctrls == "" })
		return walkQuota(root, rel, readCPUMax)
	}
	var base string
	for _, d := range []string{"cpu", "cpu,cpuacct", "cpuacct,cpu"} {
		if fi, err := os.Stat(filepath.Join(root, d)); err == nil && fi.IsDir() {
			base = filepath.Join(root, d)
			break
		}
	}
	if base == "" {
		return 0, false, nil
	}
	rel := cgroupPath(procCgroup, func(id int, ctrls string) bool {
		for _, c := range strings.Split(ctrls, ",") {
			if c == "cpu" {
				return id != 0
			}
		}
		return false
	})
	return walkQuota(base, rel, readCFS)
}

// cgroupPath returns the cgroup path of the first line of a
// /proc/self/cgroup file ("id:controllers:path") that match accepts, or "/"
// when there is none or the file cannot be read.
func cgroupPath(file string, match func(id int, ctrls string) bool) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return "/"
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		id, err := strconv.Atoi(parts[0])
		if err != nil {
			continue
		}
		if match(id, parts[1]) {
			return parts[2]
		}
	}
	return "/"
}

// walkQuota reads the quota of base/rel and of each ancestor up to base and
// returns the smallest. Directories that do not exist are skipped: inside a
// container without a cgroup namespace the path names the host's hierarchy,
// and only base (the container's own cgroup) is mounted.
func walkQuota(base, rel string, read func(dir string) (float64, bool, error)) (float64, bool, error) {
	rel = filepath.Clean("/" + rel) // never escape base
	best, found := math.Inf(1), false
	for {
		q, ok, err := read(filepath.Join(base, rel))
		if err != nil {
			return 0, false, err
		}
		if ok && q < best {
			best, found = q, true
		}
		if rel == "/" {
			break
		}
		rel = filepath.Dir(rel)
	}
	if !found {
		return 0, false, nil
	}
	return best, true, nil
}

// readCPUMax reads a cgroup v2 cpu.max file: "max 100000" (no quota) or
// "50000 100000" (quota and period in microseconds).
func readCPUMax(dir string) (float64, bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cpu.max"))
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	} else if err != nil {
		return 0, false, fmt.Errorf("stat: cgroup: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) == 0 || len(f) > 2 {
		return 0, false, fmt.Errorf("stat: cgroup: malformed %s: %q", filepath.Join(dir, "cpu.max"), b)
	}
	if f[0] == "max" {
		return 0, false, nil
	}
	period := "100000" // the kernel's default when the period is omitted
	if len(f) == 2 {
		period = f[1]
	}
	return quotaRatio(filepath.Join(dir, "cpu.max"), f[0], period)
}

// readCFS reads cgroup v1 cpu.cfs_quota_us and cpu.cfs_period_us; a quota
// of -1 means none.
func readCFS(dir string) (float64, bool, error) {
	qf := filepath.Join(dir, "cpu.cfs_quota_us")
	qb, err := os.ReadFile(qf)
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	} else if err != nil {
		return 0, false, fmt.Errorf("stat: cgroup: %w", err)
	}
	q := strings.TrimSpace(string(qb))
	if q == "-1" {
		return 0, false, nil
	}
	pb, err := os.ReadFile(filepath.Join(dir, "cpu.cfs_period_us"))
	if err != nil {
		return 0, false, fmt.Errorf("stat: cgroup: quota without period: %w", err)
	}
	return quotaRatio(qf, q, strings.TrimSpace(string(pb)))
}

func quotaRatio(file, quota, period string) (float64, bool, error) {
	q, err1 := strconv.ParseInt(quota, 10, 64)
	p, err2 := strconv.ParseInt(period, 10, 64)
	if err1 != nil || err2 != nil || q <= 0 || p <= 0 {
		return 0, false, fmt.Errorf("stat: cgroup: malformed quota %q / period %q in %s", quota, period, file)
	}
	return float64(q) / float64(p), true, nil
}
