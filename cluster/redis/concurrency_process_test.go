package sluiceredis

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster/redis/redistest"
	"github.com/sluice-go/sluice/rules"
)

// The fleet of TestProcessFleetConcurrency: engines in separate OS
// processes (the test binary re-executed, TestMain running concChild),
// each running concCalls long calls at once against one fleet-wide
// concurrency rule through a real redis-server. A call that is admitted
// holds its slot until the parent writes "release" on the process's stdin
// (or closes it); a refused one tries again 10 ms later.

const (
	envConcChild = "SLUICE_TEST_CONC_CHILD" // the instance's index
	envConcSpec  = "SLUICE_TEST_CONC_SPEC"  // concSpec as JSON
	concCalls    = 10
	concApp      = "concfleet"
	concKey      = concApp + "/conc/export"
)

type concSpec struct {
	Redis     string
	Limit     int
	Heartbeat time.Duration
}

// concLine is a report of one instance, every 20 ms and at its end.
type concLine struct {
	Instance int  `json:"instance"`
	InFlight int  `json:"inFlight"` // calls holding a slot now
	Fallback bool `json:"fallback"` // the engine decides by its fallback
	Live     int  `json:"live"`     // live instances the engine counts
	// HeldAtFallback is the calls in flight when the instance first saw
	// its engine in fallback, MaxFallback the most in flight since.
	HeldAtFallback int `json:"heldAtFallback"`
	MaxFallback    int `json:"maxFallback"`
	// Stalls counts the times the process was not scheduled for longer
	// than Heartbeat (a 20 ms ticker saw a gap that long): renewals late
	// enough for a lease to run out, as on a host far busier than it has
	// cores.
	Stalls int    `json:"stalls"`
	Done   bool   `json:"done,omitempty"`
	Err    string `json:"err,omitempty"`
}

// concChild runs one instance until its stdin closes and returns the exit
// code.
func concChild() int {
	idx, _ := strconv.Atoi(os.Getenv(envConcChild))
	var mu sync.Mutex // guards enc
	enc := json.NewEncoder(os.Stdout)
	say := func(l concLine) {
		mu.Lock()
		_ = enc.Encode(l)
		mu.Unlock()
	}
	var sp concSpec
	if err := json.Unmarshal([]byte(os.Getenv(envConcSpec)), &sp); err != nil {
		say(concLine{Instance: idx, Done: true, Err: err.Error()})
		return 1
	}
	life := time.AfterFunc(2*time.Minute, func() { os.Exit(3) }) // never outlive the test
	defer life.Stop()
	rdb := redis.NewClient(&redis.Options{Addr: sp.Redis, MaxRetries: -1, DialerRetries: 1,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second, ContextTimeoutEnabled: true})
	defer rdb.Close()
	g := sluice.New(sluice.WithCluster(New(rdb), sluice.ClusterConfig{App: concApp, InstanceID: fmt.Sprint("inst-", idx),
		// A generous Timeout, as in TestProcessFleetSharesBudget: a late
		// call is refused (its slot may be in the store), which a loaded
		// host would otherwise cause now and then.
		HeartbeatInterval: sp.Heartbeat, ProbeInterval: 50 * time.Millisecond, ExpectedInstances: 3, Timeout: 2 * time.Second}))
	defer g.Close()
	if err := g.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "export", Metric: rules.Concurrency,
		Threshold: float64(sp.Limit), Cluster: &rules.Cluster{}}}}); err != nil {
		say(concLine{Instance: idx, Done: true, Err: err.Error()})
		return 1
	}
	var (
		inflight, heldAt, maxFb atomic.Int64
		fell                    atomic.Bool
		relMu                   sync.Mutex
		release                 = make(chan struct{})
		quit                    = make(chan struct{})
		wg                      sync.WaitGroup
	)
	fallback := func() bool { st, _ := g.ClusterStatus(); return st.Fallback }
	for i := 0; i < concCalls; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				relMu.Lock()
				rel := release
				relMu.Unlock()
				p, err := g.Entry("export")
				if err != nil {
					select {
					case <-quit:
						return
					case <-time.After(10 * time.Millisecond):
						continue
					}
				}
				n := inflight.Add(1)
				if fallback() {
					for m := maxFb.Load(); n > m && !maxFb.CompareAndSwap(m, n); m = maxFb.Load() {
					}
				}
				select {
				case <-rel:
				case <-quit:
				}
				inflight.Add(-1)
				p.Exit()
				select {
				case <-quit:
					return
				default:
				}
			}
		}()
	}
	var stalls atomic.Int64
	go func() {
		last := time.Now()
		for {
			select {
			case <-quit:
				return
			case now := <-time.After(20 * time.Millisecond):
				if now.Sub(last) > sp.Heartbeat {
					stalls.Add(1)
				}
				last = now
			}
		}
	}()
	report := func() concLine {
		st, _ := g.ClusterStatus()
		if st.Fallback && fell.CompareAndSwap(false, true) {
			heldAt.Store(inflight.Load())
		}
		return concLine{Instance: idx, InFlight: int(inflight.Load()), Fallback: st.Fallback, Live: st.Live,
			HeldAtFallback: int(heldAt.Load()), MaxFallback: int(maxFb.Load()), Stalls: int(stalls.Load())}
	}
	stop := make(chan struct{})
	go func() {
		defer close(stop)
		for {
			select {
			case <-quit:
				return
			case <-time.After(20 * time.Millisecond):
				say(report())
			}
		}
	}()
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if sc.Text() == "release" {
			relMu.Lock()
			close(release)
			release = make(chan struct{})
			relMu.Unlock()
		}
	}
	close(quit)
	wg.Wait()
	<-stop
	l := report()
	l.Done = true
	say(l)
	return 0
}

// concFleet is the parent's side of the processes.
type concFleet struct {
	t     *testing.T
	cmds  []*exec.Cmd
	ins   []io.WriteCloser
	mu    sync.Mutex
	last  []concLine
	seq   []int // lines received per instance
	wg    sync.WaitGroup
	store *Store
}

func (f *concFleet) latest(i int) (concLine, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last[i], f.seq[i]
}

// await polls cond every 10 ms until it holds, failing the test after
// limit.
func await(t *testing.T, what string, limit time.Duration, cond func() bool) time.Duration {
	t.Helper()
	began := time.Now()
	for !cond() {
		if time.Since(began) > limit {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(began)
}

// fresh waits for a report of instance i sent after this call and returns it.
func (f *concFleet) fresh(i int) concLine {
	_, s0 := f.latest(i)
	var l concLine
	await(f.t, "a report of instance "+strconv.Itoa(i), 10*time.Second, func() bool {
		var s int
		l, s = f.latest(i)
		return s > s0+1
	})
	return l
}

func (f *concFleet) send(i int, cmd string) {
	if _, err := io.WriteString(f.ins[i], cmd+"\n"); err != nil {
		f.t.Fatalf("instance %d: %v", i, err)
	}
}

// members returns the live slots of the budget, holder -> deadline (µs).
func (f *concFleet) members(raw *redis.Client) map[string]int64 {
	f.t.Helper()
	zs, err := raw.ZRangeWithScores(ctxT(f.t), f.store.slotsKey(concKey), 0, -1).Result()
	if err != nil {
		f.t.Fatal(err)
	}
	now := redisTime(f.t, raw)
	out := make(map[string]int64)
	for _, z := range zs {
		if int64(z.Score) > now {
			out[z.Member.(string)] = int64(z.Score)
		}
	}
	return out
}

// TestProcessFleetConcurrency: three instances, each its own OS process,
// run ten long calls each against "at most 12 in flight in the fleet".
//   - Exactly 12 slots are live at every sample over more than three
//     lease lifetimes, the same 12 throughout (long calls keep theirs).
//   - An instance killed with SIGKILL holding slots: every one of its
//     leases ends within the TTL (three heartbeats) of its death, on the
//     server's clock, and the others fill the 12 again.
//   - Redis killed: each instance admits at most max(held, its share) in
//     flight; released, each refills exactly its share, 12/2 = 6.
//   - Redis back, empty: the 12 in flight are registered again before any
//     remote admission; released, the fleet refills exactly 12.
func TestProcessFleetConcurrency(t *testing.T) {
	const (
		instances = 3
		limit     = 12
		hb        = 300 * time.Millisecond
		ttl       = 3 * hb
	)
	srv := redistest.Start(t)
	raw := srv.Client(t)
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := json.Marshal(concSpec{Redis: srv.Addr(), Limit: limit, Heartbeat: hb})
	f := &concFleet{t: t, last: make([]concLine, instances), seq: make([]int, instances), store: New(raw)}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := 0; i < instances; i++ {
		cmd := exec.CommandContext(ctx, bin, "-test.run=^$")
		cmd.Env = append(os.Environ(), envConcChild+"="+strconv.Itoa(i), envConcSpec+"="+string(spec))
		cmd.SysProcAttr = childProcAttr()
		cmd.Stderr = os.Stderr
		cmd.WaitDelay = time.Second
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		f.cmds, f.ins = append(f.cmds, cmd), append(f.ins, in)
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				var l concLine
				if json.Unmarshal(sc.Bytes(), &l) != nil || l.Instance != i {
					continue
				}
				if l.Err != "" {
					t.Errorf("instance %d: %s", i, l.Err)
				}
				f.mu.Lock()
				f.last[i] = l
				f.seq[i]++
				f.mu.Unlock()
			}
		}()
	}
	t.Cleanup(func() {
		cancel()
		for _, c := range f.cmds {
			if c.Process != nil {
				_ = c.Process.Kill()
			}
		}
		f.wg.Wait()
	})
	count := func() int64 { return inUse(t, f.store, concKey) }

	// 1. Exactly the limit, the same holders, over more than three TTLs.
	// Settled: 12 in Redis and 12 calls in flight (a slot of a call that
	// was late and refused lives until the next renewal round).
	await(t, "12 slots taken", 20*time.Second, func() bool {
		sum := 0
		for i := 0; i < instances; i++ {
			l, _ := f.latest(i)
			sum += l.InFlight
		}
		return sum == limit && count() == limit
	})
	// A process that is not scheduled for longer than its lease less a
	// renewal interval loses its leases, by design; the children count
	// such stalls, and a sample that is not exact must follow one.
	stalls := func() int {
		n := 0
		for i := 0; i < instances; i++ {
			l, _ := f.latest(i)
			n += l.Stalls
		}
		return n
	}
	first := f.members(raw)
	stalled := stalls()
	began := time.Now()
	samples := 0
	for time.Since(began) < 4*ttl || samples < 40 {
		if n := count(); n != limit {
			time.Sleep(100 * time.Millisecond) // the next reports
			if s := stalls(); s > stalled {
				t.Logf("sample %d: %d in use after an instance stalled longer than a heartbeat (a lease may run out, as designed); settling again", samples, n)
				await(t, "12 slots taken again", 20*time.Second, func() bool { return count() == limit })
				stalled, first = stalls(), f.members(raw)
				continue
			}
			for i := 0; i < instances; i++ {
				l, _ := f.latest(i)
				t.Logf("instance %d: %+v", i, l)
			}
			t.Fatalf("sample %d: %d slots in use, want exactly %d, and no instance stalled", samples, n, limit)
		}
		samples++
		time.Sleep(20 * time.Millisecond)
	}
	last := f.members(raw)
	for m := range first {
		if _, ok := last[m]; !ok && stalls() == stalled {
			t.Errorf("holder %s lost its slot while its call went on", m)
		}
	}
	sum := 0
	for i := 0; i < instances; i++ {
		sum += f.fresh(i).InFlight
	}
	t.Logf("%d samples over %v: %d in use each time; the instances count %d in flight", samples, time.Since(began).Round(time.Millisecond), limit, sum)
	if sum != limit {
		t.Errorf("the instances hold %d calls, want %d", sum, limit)
	}

	// 2. SIGKILL the instance holding the most slots.
	victim, most := 0, -1
	for i := 0; i < instances; i++ {
		if n := f.fresh(i).InFlight; n > most {
			victim, most = i, n
		}
	}
	prefix := fmt.Sprint("inst-", victim, ":")
	if err := f.cmds[victim].Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = f.cmds[victim].Wait()
	killed := redisTime(t, raw)
	killedAt := time.Now()
	held := 0
	for m, dl := range f.members(raw) {
		if strings.HasPrefix(m, prefix) {
			held++
			if dl > killed+ttl.Microseconds() {
				t.Errorf("%s: lease ends %v after the kill, past the TTL %v", m, time.Duration(dl-killed)*time.Microsecond, ttl)
			}
		}
	}
	if held != most {
		t.Errorf("the killed instance held %d slots in Redis, reported %d", held, most)
	}
	back := await(t, "the killed instance's slots taken by the others", 10*time.Second, func() bool {
		for m := range f.members(raw) {
			if strings.HasPrefix(m, prefix) {
				return false
			}
		}
		return count() == limit
	})
	t.Logf("SIGKILL with %d slots held: all %d back in use by the others %v after the kill (TTL %v)", held, limit, back.Round(time.Millisecond), ttl)
	_ = killedAt
	alive := []int{}
	for i := 0; i < instances; i++ {
		if i != victim {
			alive = append(alive, i)
		}
	}
	await(t, "the survivors count 2 live instances", 10*time.Second, func() bool {
		for _, i := range alive {
			if f.fresh(i).Live != 2 {
				return false
			}
		}
		return true
	})

	// 3. Redis down: each survivor's in flight stays within max(held, share).
	share := limit / len(alive)
	srv.Kill()
	await(t, "the survivors in fallback", 10*time.Second, func() bool {
		for _, i := range alive {
			if !f.fresh(i).Fallback {
				return false
			}
		}
		return true
	})
	for _, i := range alive {
		f.send(i, "release")
	}
	total := 0
	await(t, "each survivor refilled its share", 10*time.Second, func() bool {
		total = 0
		for _, i := range alive {
			l := f.fresh(i)
			if l.InFlight != share {
				return false
			}
			total += l.InFlight
		}
		return true
	})
	bound := 0
	for _, i := range alive {
		l := f.fresh(i)
		b := max(l.HeldAtFallback, share)
		bound += b
		t.Logf("outage: instance %d had %d in flight when it saw the fallback, then at most %d (share %d)", i, l.HeldAtFallback, l.MaxFallback, share)
		if l.MaxFallback > b || l.InFlight > share {
			t.Errorf("instance %d: %d in flight in fallback, bound max(%d held, share %d)", i, l.MaxFallback, l.HeldAtFallback, share)
		}
	}
	t.Logf("outage: the fleet holds %d in flight (bound %d = sum of max(held, share); %d + live x share = %d)", total, bound, limit, limit+len(alive)*share)

	// 4. Redis back empty: the calls in flight are registered again.
	srv.Restart()
	await(t, "the survivors back to remote", 20*time.Second, func() bool {
		for _, i := range alive {
			if f.fresh(i).Fallback {
				return false
			}
		}
		return true
	})
	// Every call in flight is registered again: the set counts them all
	// (more than 12 if an instance recovered past the others' grace).
	var inFlight int
	await(t, "the set counts every call in flight", 10*time.Second, func() bool {
		inFlight = 0
		for _, i := range alive {
			inFlight += f.fresh(i).InFlight
		}
		return count() == int64(inFlight)
	})
	t.Logf("after recovery: %d slots in use, %d calls in flight", count(), inFlight)
	if inFlight < total {
		t.Errorf("%d calls in flight after recovery, fewer than the %d held through the outage", inFlight, total)
	}
	before := f.members(raw)
	for _, i := range alive {
		f.send(i, "release")
	}
	// Every released call exited (its slot gone) and the fleet refilled.
	await(t, "the fleet refilled 12 remotely", 10*time.Second, func() bool {
		for m := range f.members(raw) {
			if _, old := before[m]; old {
				return false
			}
		}
		return count() == limit
	})
	for s := 0; s < 20; s++ {
		if n := count(); n != limit {
			t.Fatalf("after recovery, sample %d: %d in use, want %d", s, n, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, i := range alive {
		_ = f.ins[i].Close()
	}
	for _, i := range alive {
		if err := f.cmds[i].Wait(); err != nil {
			t.Errorf("instance %d: %v", i, err)
		}
	}
	if n := count(); n != 0 {
		t.Errorf("%d slots in use after every instance closed, want 0", n)
	}
}
