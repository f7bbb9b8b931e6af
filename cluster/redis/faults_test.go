package sluiceredis

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sort"
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

// The fault tests: instances in separate OS processes (the test binary
// re-executed, TestMain running faultChild), each with its own engine and
// go-redis client configured as docs/design/cluster.md says, at the engine's
// default settings, sharing limits through a real redis-server that the
// test kills and restarts, pauses, puts to sleep, or starts only after the
// instances, or beside busy loops it starts itself. Admissions are counted
// per aligned wall-clock second; every second must admit at most 1.05 ×
// the Threshold of each flow rule, and every user of the per-user rule at
// most its token bucket's budget + 1 over the run.

const (
	envFaultChild = "SLUICE_TEST_FAULT_CHILD" // the instance's index
	envFaultSpec  = "SLUICE_TEST_FAULT_SPEC"  // faultSpec as JSON
	envBusyUntil  = "SLUICE_TEST_BUSY_UNTIL"  // a busy loop: Unix ns to stop at
)

// faultSpec is what every instance runs.
type faultSpec struct {
	Redis   string
	Start   int64 // Unix ns of the first second of load (a whole second)
	Seconds int
	// Flow rules: a leased one ("api") and a strict one ("strict"), with
	// their Thresholds per second and the entries per second each
	// instance makes (0: the rule is not run).
	Leased, LeasedDemand int
	Strict, StrictDemand int
	// The per-user rule ("comments"): Users users, UserLimit per
	// UserWindow each, and the entries per second each instance makes,
	// in turn over the users.
	Users, UserLimit, UserDemand int
	UserWindow                   time.Duration
}

// faultLine is one line an instance writes: what it admitted in one
// second of load, or, with Done, its end and each user's admissions.
type faultLine struct {
	Instance int            `json:"i"`
	Second   int            `json:"s"`
	Admitted map[string]int `json:"a,omitempty"`
	Fallback int            `json:"f,omitempty"` // decisions of any rule by a fallback
	// Straddled: admissions of any rule by an Entry that began in this
	// second and returned in a later one, counted in no second.
	Straddled int            `json:"st,omitempty"`
	Mode      string         `json:"m,omitempty"` // at the end of the second
	Live      int            `json:"l,omitempty"`
	Source    string         `json:"src,omitempty"`
	Done      bool           `json:"done,omitempty"`
	Users     map[string]int `json:"u,omitempty"`
	Trans     int            `json:"t,omitempty"`    // transitions so far
	Logs      int            `json:"logs,omitempty"` // go-redis's log lines, through SetLogger
	Err       string         `json:"err,omitempty"`
}

// faultClient is the go-redis client of an instance, as docs/design/cluster.md
// configures it: no retries, one dial, read and write timeouts above the
// engine's Timeout (whose deadline ends every call), and the context's
// deadline honoured.
func faultClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: addr, MaxRetries: -1, DialerRetries: 1,
		DialTimeout: 100 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second,
		ContextTimeoutEnabled: true,
	})
}

// faultChild runs one instance and returns the exit code.
func faultChild() int {
	idx, _ := strconv.Atoi(os.Getenv(envFaultChild))
	enc := json.NewEncoder(os.Stdout)
	fail := func(err error) int {
		_ = enc.Encode(faultLine{Instance: idx, Done: true, Err: err.Error()})
		return 1
	}
	var sp faultSpec
	if err := json.Unmarshal([]byte(os.Getenv(envFaultSpec)), &sp); err != nil {
		return fail(err)
	}
	start := time.Unix(0, sp.Start)
	life := time.AfterFunc(time.Until(start)+time.Duration(sp.Seconds+20)*time.Second, func() { os.Exit(3) })
	defer life.Stop()

	var logs lineCounter
	SetLogger(slog.New(slog.NewTextHandler(&logs, nil)))
	rdb := faultClient(sp.Redis)
	defer rdb.Close()
	var trans sync.Mutex
	ntrans := 0
	g := sluice.New(sluice.WithCluster(New(rdb), sluice.ClusterConfig{
		App: "faults", InstanceID: fmt.Sprint("instance-", idx),
	}))
	onTransition(g, func(transition) { trans.Lock(); ntrans++; trans.Unlock() })
	defer g.Close()
	var flows []rules.Flow
	if sp.Leased > 0 {
		flows = append(flows, rules.Flow{Resource: "api", Threshold: float64(sp.Leased), Cluster: &rules.Cluster{}})
	}
	if sp.Strict > 0 {
		flows = append(flows, rules.Flow{Resource: "strict", Threshold: float64(sp.Strict), Cluster: &rules.Cluster{Strict: true}})
	}
	if err := g.UpdateRules(func(s *rules.Set) { s.Flow = flows }); err != nil {
		return fail(err)
	}
	if sp.Users > 0 {
		if err := g.UpdateRules(func(s *rules.Set) {
			s.Param = []rules.Param{{
				Resource: "comments", Key: "user", Threshold: int64(sp.UserLimit), Duration: sp.UserWindow,
				Cluster: &rules.Cluster{},
			}}
		}); err != nil {
			return fail(err)
		}
	}
	time.Sleep(time.Until(start))

	users := map[string]int{}
	// Every admission counts in the aligned second of its decision (see
	// entry), whatever the loop's pace on a busy host; the lines go out at
	// the end.
	lines := make([]faultLine, sp.Seconds)
	for s := range lines {
		lines[s] = faultLine{Instance: idx, Second: s, Admitted: map[string]int{}}
	}
	snap := func(s int) {
		st, _ := g.ClusterStatus()
		trans.Lock()
		lines[s].Mode, lines[s].Live, lines[s].Source, lines[s].Trans = map[bool]string{false: "remote", true: "fallback"}[st.Fallback], st.Live, st.LiveSource, ntrans
		trans.Unlock()
	}
	sent := map[string]int{}
	// An admission counts in the aligned second of the readings just
	// before and just after its Entry (its decision lies between them), as
	// in TestProcessFleetSharesBudget: on a busy host a goroutine can be
	// descheduled in an Entry across a boundary, and the reading before
	// would count a decision of the next second in this one. When the
	// readings straddle a boundary the admission is Straddled, in no
	// second.
	entry := func(res string, opts ...sluice.EntryOption) bool {
		sec := int(time.Since(start) / time.Second)
		if sec >= sp.Seconds {
			return false
		}
		p, err := g.Entry(res, opts...)
		after := int(time.Since(start) / time.Second)
		if err == nil {
			p.Exit()
			if after == sec {
				lines[sec].Admitted[res]++
			} else {
				lines[sec].Straddled++
			}
			return true
		}
		if strings.Contains(err.Error(), "fallback") {
			lines[sec].Fallback++
		}
		return false
	}
	last := -1
	for {
		el := time.Since(start)
		sec := int(el / time.Second)
		for ; last < sec && last < sp.Seconds; last++ {
			if last >= 0 {
				snap(last)
			}
		}
		if sec >= sp.Seconds {
			break
		}
		for due := int(el.Seconds() * float64(sp.LeasedDemand)); sent["api"] < due; sent["api"]++ {
			entry("api")
		}
		for due := int(el.Seconds() * float64(sp.StrictDemand)); sent["strict"] < due; sent["strict"]++ {
			entry("strict")
		}
		for due := int(el.Seconds() * float64(sp.UserDemand)); sent["comments"] < due; sent["comments"]++ {
			u := "user-" + strconv.Itoa((sent["comments"]*7+idx*13)%sp.Users)
			if entry("comments", sluice.WithStringAttachment("user", u)) {
				users[u]++
			}
		}
		time.Sleep(time.Millisecond)
	}
	for _, l := range lines {
		if err := enc.Encode(l); err != nil {
			return 1
		}
	}
	_ = enc.Encode(faultLine{Instance: idx, Done: true, Users: users, Logs: int(logs.n.Load())})
	return 0
}

// lineCounter counts the lines written to it.
type lineCounter struct{ n atomic.Int64 }

func (c *lineCounter) Write(p []byte) (int, error) {
	c.n.Add(int64(bytes.Count(p, []byte("\n"))))
	return len(p), nil
}

// busyLoop spins until the Unix ns in envBusyUntil: one core's worth of
// load that the test starts and that stops by itself.
func busyLoop() int {
	ns, _ := strconv.ParseInt(os.Getenv(envBusyUntil), 10, 64)
	until := time.Unix(0, ns)
	x := 0
	for time.Now().Before(until) {
		for i := 0; i < 1_000_000; i++ {
			x += i
		}
	}
	if x == 42 {
		fmt.Println(x)
	}
	return 0
}

// faultRun is one run of a fleet.
type faultRun struct {
	t         *testing.T
	sp        faultSpec
	instances int
	start     time.Time
	maxLogs   int // go-redis log lines allowed per instance

	mu    sync.Mutex
	lines []faultLine
	wg    sync.WaitGroup
	cmds  []*exec.Cmd
}

// startFleet starts the instances, the load beginning at the second
// boundary two seconds ahead.
func startFleet(t *testing.T, instances int, sp faultSpec) *faultRun {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r := &faultRun{t: t, instances: instances, maxLogs: 3}
	r.start = time.Now().Truncate(time.Second).Add(3 * time.Second)
	sp.Start = r.start.UnixNano()
	r.sp = sp
	spec, _ := json.Marshal(sp)
	ctx, cancel := context.WithDeadline(context.Background(), r.start.Add(time.Duration(sp.Seconds+15)*time.Second))
	t.Cleanup(func() {
		cancel()
		for _, c := range r.cmds {
			if c != nil && c.Process != nil {
				_ = c.Process.Kill()
			}
		}
	})
	for i := 0; i < instances; i++ {
		cmd := exec.CommandContext(ctx, bin, "-test.run=^$")
		cmd.Env = append(os.Environ(), envFaultChild+"="+strconv.Itoa(i), envFaultSpec+"="+string(spec))
		cmd.SysProcAttr = childProcAttr()
		cmd.Stderr = os.Stderr
		cmd.WaitDelay = time.Second
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r.cmds = append(r.cmds, cmd)
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			sc := bufio.NewScanner(out)
			sc.Buffer(make([]byte, 1<<16), 1<<20)
			for sc.Scan() {
				var l faultLine
				if json.Unmarshal(sc.Bytes(), &l) != nil {
					continue
				}
				r.mu.Lock()
				r.lines = append(r.lines, l)
				r.mu.Unlock()
			}
		}()
	}
	return r
}

// at sleeps until d after the start of the load.
func (r *faultRun) at(d time.Duration) { time.Sleep(time.Until(r.start.Add(d))) }

// busy starts n busy loops, each its own process, from now until d
// after the start of the load.
func (r *faultRun) busy(n int, d time.Duration) {
	r.t.Helper()
	bin, err := os.Executable()
	if err != nil {
		r.t.Fatal(err)
	}
	until := r.start.Add(d)
	for i := 0; i < n; i++ {
		cmd := exec.Command(bin, "-test.run=^$")
		cmd.Env = append(os.Environ(), envBusyUntil+"="+strconv.FormatInt(until.UnixNano(), 10))
		cmd.SysProcAttr = childProcAttr()
		if err := cmd.Start(); err != nil {
			r.t.Fatal(err)
		}
		r.t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
}

// check waits for the instances and checks every aligned second and every
// user, printing the table when a check fails (or with -v).
func (r *faultRun) check() {
	t := r.t
	t.Helper()
	r.wg.Wait()
	for i, c := range r.cmds {
		if err := c.Wait(); err != nil {
			t.Errorf("instance %d: %v", i, err)
		}
	}
	n, secs := r.instances, r.sp.Seconds
	type cell struct {
		a    map[string]int
		mode string
		live int
		src  string
		fb   int
		st   int
		tr   int
		seen bool
	}
	table := make([][]cell, secs)
	for s := range table {
		table[s] = make([]cell, n)
	}
	users := map[string]int{}
	done := 0
	var logs []string
	for _, l := range r.lines {
		switch {
		case l.Err != "":
			t.Errorf("instance %d: %s", l.Instance, l.Err)
		case l.Done:
			done++
			logs = append(logs, strconv.Itoa(l.Logs))
			if l.Logs > r.maxLogs {
				t.Errorf("instance %d: %d go-redis log lines, want at most %d", l.Instance, l.Logs, r.maxLogs)
			}
			for u, k := range l.Users {
				users[u] += k
			}
		case l.Second >= 0 && l.Second < secs && l.Instance >= 0 && l.Instance < n:
			table[l.Second][l.Instance] = cell{l.Admitted, l.Mode, l.Live, l.Source, l.Fallback, l.Straddled, l.Trans, true}
		}
	}
	if done != n {
		t.Errorf("%d instances finished, want %d", done, n)
	}
	var b strings.Builder
	limits := []struct {
		res   string
		limit int
	}{{"api", r.sp.Leased}, {"strict", r.sp.Strict}}
	worst := map[string]int{}
	for s := 0; s < secs; s++ {
		fmt.Fprintf(&b, "second %2d:", s)
		for _, lim := range limits {
			if lim.limit == 0 {
				continue
			}
			sum := 0
			per := make([]string, n)
			for i := 0; i < n; i++ {
				sum += table[s][i].a[lim.res]
				per[i] = strconv.Itoa(table[s][i].a[lim.res])
			}
			worst[lim.res] = max(worst[lim.res], sum)
			mark := ""
			if sum*100 > lim.limit*105 {
				mark = " OVER"
				t.Errorf("second %d: %s admitted %d > 1.05 × %d", s, lim.res, sum, lim.limit)
			}
			fmt.Fprintf(&b, " %s %d (%s)%s;", lim.res, sum, strings.Join(per, "+"), mark)
		}
		if r.sp.Users > 0 {
			sum := 0
			for i := 0; i < n; i++ {
				sum += table[s][i].a["comments"]
			}
			fmt.Fprintf(&b, " comments %d;", sum)
		}
		for i := 0; i < n; i++ {
			c := table[s][i]
			if !c.seen {
				t.Errorf("second %d: no report from instance %d", s, i)
				continue
			}
			fmt.Fprintf(&b, " [%s live %d %s fb %d st %d tr %d]", c.mode, c.live, c.src, c.fb, c.st, c.tr)
		}
		b.WriteString("\n")
	}
	if r.sp.Users > 0 {
		// A token bucket of UserLimit per UserWindow, full at first:
		// over the run at most UserLimit + UserLimit × run / UserWindow.
		budget := r.sp.UserLimit + int(float64(r.sp.UserLimit)*float64(secs)*float64(time.Second)/float64(r.sp.UserWindow))
		names := make([]string, 0, len(users))
		for u := range users {
			names = append(names, u)
		}
		sort.Strings(names)
		over, most := 0, 0
		for _, u := range names {
			most = max(most, users[u])
			if users[u] > budget+1 {
				over++
				t.Errorf("user %s admitted %d > budget %d + 1", u, users[u], budget)
			}
		}
		worst["comments"] = most
		fmt.Fprintf(&b, "per user: budget %d over the run, most admitted %d, %d users over budget + 1\n", budget, most, over)
	}
	fmt.Fprintf(&b, "worst second: %v; go-redis log lines per instance: %s\n", worst, strings.Join(logs, ", "))
	if t.Failed() || testing.Verbose() {
		t.Log("\n" + b.String())
	}
}

func needLong(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of load in several processes; runs without -short")
	}
}

// TestProcessFaultRestart: three instances share 600/s (five times the
// demand) while Redis is killed with SIGKILL after 2.5 s and restarted
// empty on the same port 1.5 s later. Before the live count held, the
// restarted Redis counted 1, then 2 instances, and an instance still
// deciding locally took a share of 600/1 or 600/2; the second of the kill
// admitted Redis's 600 and the local shares both.
func TestProcessFaultRestart(t *testing.T) {
	needLong(t)
	srv := redistest.Start(t)
	r := startFleet(t, 3, faultSpec{Redis: srv.Addr(), Seconds: 9, Leased: 600, LeasedDemand: 1000})
	r.at(2500 * time.Millisecond)
	srv.Kill()
	r.at(4 * time.Second)
	srv.Restart()
	r.check()
}

// TestProcessFaultPauseSleep: Redis stops answering without closing
// connections: CLIENT PAUSE 5000 ALL after 1.5 s, DEBUG SLEEP 3 after
// 9.5 s. Calls pass their deadlines; three late calls in a row switch an
// instance to its local share, and Redis charges the paused calls when it
// answers again.
func TestProcessFaultPauseSleep(t *testing.T) {
	needLong(t)
	srv := redistest.Start(t, "--enable-debug-command", "yes")
	admin := srv.Client(t)
	r := startFleet(t, 3, faultSpec{Redis: srv.Addr(), Seconds: 15, Leased: 600, LeasedDemand: 1000})
	r.at(1500 * time.Millisecond)
	if err := admin.Do(context.Background(), "CLIENT", "PAUSE", "5000", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	r.at(9500 * time.Millisecond)
	sleeper := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: 10 * time.Second, MaxRetries: -1})
	defer sleeper.Close()
	if err := sleeper.Do(context.Background(), "DEBUG", "SLEEP", "3").Err(); err != nil {
		t.Fatal(err)
	}
	r.check()
}

// TestProcessFaultColdStart: three instances start while Redis is down
// and decide by their shares until it starts, 3 s into the load. Before
// the expected fleet size, each assumed it was alone and admitted the
// whole 600/s limit.
func TestProcessFaultColdStart(t *testing.T) {
	needLong(t)
	srv := redistest.Start(t)
	srv.Kill()
	r := startFleet(t, 3, faultSpec{Redis: srv.Addr(), Seconds: 8, Leased: 600, LeasedDemand: 1000})
	r.at(3 * time.Second)
	srv.Restart()
	r.check()
}

// TestProcessFaultBusyHost: three busy loops, one process each, beside
// three instances on a 2-core host for the whole run: a leased rule
// (1,000/s, twice the demand), a strict rule (100/s, twice) and a per-user
// rule (5 per 10 s for 50 users, about three entries per user per second
// in all). Store calls get slow, not lost: before, one late call sent an
// instance to its local share for a whole probe interval while the others
// took the whole budget from Redis.
func TestProcessFaultBusyHost(t *testing.T) {
	needLong(t)
	srv := redistest.Start(t)
	const secs = 10
	r := startFleet(t, 3, faultSpec{
		Redis: srv.Addr(), Seconds: secs,
		Leased: 1000, LeasedDemand: 700,
		Strict: 100, StrictDemand: 70,
		Users: 50, UserLimit: 5, UserWindow: 10 * time.Second, UserDemand: 50,
	})
	r.busy(3, secs*time.Second)
	r.check()
}

// TestProcessFaultUsers: three instances share a per-user rule, 1 per
// 10 s for 200 users, at about 45 times its rate, while Redis stops
// answering (CLIENT PAUSE 3000 ALL after 2 s: late calls, then every
// instance on its local shares, then Redis's buckets again, refilled on
// its clock meanwhile) and is killed after 8 s for the rest of the run.
// Every user must get at most its token bucket's budget over the run + 1.
// Before, every instance's local share of each user was a whole request
// (1 / 3 rounded up) and started full whatever Redis had granted: three
// per user at the pause, where the budget over the run is 2.
func TestProcessFaultUsers(t *testing.T) {
	needLong(t)
	srv := redistest.Start(t)
	admin := srv.Client(t)
	r := startFleet(t, 3, faultSpec{
		Redis: srv.Addr(), Seconds: 12,
		Users: 200, UserLimit: 1, UserWindow: 10 * time.Second, UserDemand: 300,
	})
	r.maxLogs = 10 // Redis stays dead for 4 s: a few dial failures each
	r.at(2 * time.Second)
	if err := admin.Do(context.Background(), "CLIENT", "PAUSE", "3000", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	r.at(8 * time.Second)
	srv.Kill()
	r.check()
}
