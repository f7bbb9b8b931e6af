// Command system-adaptive shows system adaptive protection on a real
// workload: an HTTP service whose handler burns ~5 ms of CPU is driven past
// saturation by an open-loop load generator, twice: once without protection
// and once with a CPU-usage BBR rule. It prints throughput, p50/p99 latency
// and blocked counts for both runs and exits 0.
//
// Without protection the excess requests queue (in the listen backlog, the
// Go scheduler, the handler), so latency grows with the backlog. With the
// rule, once CPU usage is over the threshold the engine admits only as many
// requests as the process has shown it can complete without queueing
// (maxCompleted/s × min RT, Little's law) and refuses the rest at once with
// 429, so admitted requests keep a short, bounded latency while throughput
// stays near the peak.
//
// The load generator runs in a child process (this program, re-executed
// with SLUICE_EXAMPLE_LOADGEN set), so that its goroutines and its CPU time
// are not the server's: the server's CPU usage, run queue and statistics are
// its own. The child is waited for after each phase and killed if the
// program is interrupted; it exits by itself if its parent dies.
//
// Two choices matter, and docs/design/system-adaptive.md shows what happens
// without them:
//   - The handler yields to the Go scheduler every 0.5 ms of work (-slice),
//     as a handler that does I/O would. A loop that never yields keeps its P
//     until the scheduler preempts it (10 ms); with as many admitted
//     requests as Ps, new requests then wait in the run queue before they
//     reach Entry, where no in-process limiter can see or refuse them.
//   - The trigger is low (-cpu 0.2). This host is shared and sets no CPU
//     quota: a saturated process gets anywhere from a third to all of its
//     two CPUs, depending on its neighbours, so a trigger like 0.8 switches
//     BBR off exactly while the process is starved, and each such gap
//     admits a burst. BBR refuses only work beyond capacity, so a low
//     trigger costs little.
//
// Everything runs on 127.0.0.1, in about 15 seconds:
//
//	go run ./examples/system-adaptive
package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/system"
	"github.com/sluice-go/sluice/rules"
)

const (
	resource   = "GET /work"
	sentHeader = "X-Sent"                 // the client's send time, Unix nanoseconds
	childEnv   = "SLUICE_EXAMPLE_LOADGEN" // holds the child's job as JSON
)

var (
	work      = flag.Duration("work", 5*time.Millisecond, "CPU time each request burns")
	duration  = flag.Duration("duration", 5*time.Second, "measured length of each run")
	warmup    = flag.Duration("warmup", time.Second, "load offered before each run's measurement starts")
	overload  = flag.Float64("overload", 1.75, "offered load as a multiple of the measured peak throughput")
	threshold = flag.Float64("cpu", 0.2, "CPU usage threshold of the BBR rule (ratio of the CPU the process may use)")
	trace     = flag.Bool("trace", false, "print the server's view every 100 ms to stderr")
	maxOut    = flag.Int("outstanding", 256, "most requests the generator keeps in flight; further arrivals are dropped")
	slice     = flag.Duration("slice", 500*time.Microsecond, "the handler yields to the Go scheduler after each slice of CPU work; 0 means never")
)

func main() {
	if job := os.Getenv(childEnv); job != "" {
		if err := loadgen(job); err != nil {
			log.Printf("load generator: %v", err)
			os.Exit(1)
		}
		return
	}
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx)
	stop()
	if err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	iters := calibrateBurn(*work)
	limit, err := system.NewHostSource(system.HostConfig{}).CPULimit()
	if err != nil {
		return err
	}
	fmt.Printf("handler burns ~%v of CPU per request; GOMAXPROCS %d, CPU limit %.2g CPUs; load generator in a child process\n",
		*work, runtime.GOMAXPROCS(0), limit)

	// Peak: closed-loop clients on an unprotected server. The server's own
	// CPU time per request gives the throughput its CPUs can sustain (on a
	// shared host the closed-loop figure also depends on what the other
	// processes take at that moment); the CPU usage it reaches when
	// saturated sets the rule's trigger.
	clients := 2*runtime.GOMAXPROCS(0) + 2
	host := system.NewHostSource(system.HostConfig{})
	var peak struct {
		load        result
		cpu, perReq float64 // usage ratio; CPU seconds per request
	}
	err = withServer(ctx, nil, iters, func(srv *server) error {
		_, _ = host.CPUUsage() // start of the measurement
		before, start := srv.done.Load(), time.Now()
		r, err := generate(ctx, job{URL: srv.url, Clients: clients, Warmup: 300 * time.Millisecond, Duration: 1500 * time.Millisecond})
		peak.cpu, _ = host.CPUUsage()
		n := srv.done.Load() - before
		peak.load = r
		if n > 0 {
			peak.perReq = peak.cpu * limit * time.Since(start).Seconds() / float64(n)
		}
		return err
	})
	if err != nil {
		return err
	}
	capacity := peak.load.OKPerSec
	if peak.perReq > 0 {
		capacity = max(capacity, limit/peak.perReq)
	}
	rate := capacity * *overload
	fmt.Printf("peak: %.0f req/s closed loop (%d clients) at CPU usage %.2f; %.2f ms of server CPU per request → %.0f req/s on %.2g CPUs\n",
		peak.load.OKPerSec, clients, peak.cpu, peak.perReq*1e3, limit/max(peak.perReq, 1e-9), limit)
	fmt.Printf("offered load: %.0f req/s open loop (%.2f × %.0f) for %v warm-up + %v measured, at most %d outstanding\n\n",
		rate, *overload, capacity, *warmup, *duration, *maxOut)

	rule := rules.System{ID: "cpu-bbr", Metric: rules.CPUUsage, Threshold: *threshold, Strategy: rules.BBR}
	runs := []struct {
		name  string
		rules []rules.System
	}{
		{"unprotected", nil},
		{fmt.Sprintf("cpu bbr > %.2f", *threshold), []rules.System{rule}},
	}
	fmt.Printf("%-15s %6s %6s %8s %8s %8s %9s %8s %9s %8s %8s %5s %8s\n", "run", "sent/s", "ok/s", "p50", "p99", "max", "blocked/s", "dropped", "in flight", "svc p99", "wait p99", "cpu", "ok/cpu-s")
	for _, r := range runs {
		var res result
		var st serverStats
		err := withServer(ctx, r.rules, iters, func(srv *server) error {
			from := time.Now().Add(*warmup)
			stats := srv.measureFrom(from, *duration)
			// The server's CPU usage over the measured period (the child's
			// is not in it).
			cpu := system.NewHostSource(system.HostConfig{})
			timer := time.AfterFunc(time.Until(from), func() { _, _ = cpu.CPUUsage() })
			var err error
			res, err = generate(ctx, job{URL: srv.url, Rate: rate, MaxOut: *maxOut, Warmup: *warmup, Duration: *duration})
			if !timer.Stop() {
				st = stats()
				st.cpu, _ = cpu.CPUUsage()
			}
			return err
		})
		if err != nil {
			return err
		}
		secs := res.Elapsed.Seconds()
		fmt.Printf("%-15s %6.0f %6.0f %8v %8v %8v %9.0f %8d %9.1f %8v %8v %5.2f %8.0f\n", r.name, float64(res.Sent)/secs, res.OKPerSec,
			round(res.P50), round(res.P99), round(res.Max), float64(res.Blocked)/secs, res.Dropped, st.inFlight, round(st.svcP99), round(st.waitP99), st.cpu, res.OKPerSec/(st.cpu*limit))
		if res.Failed > 0 {
			fmt.Printf("%-15s %d requests failed\n", "", res.Failed)
		}
	}
	fmt.Printf("\nok/s, latencies (of ok requests) and counts cover the %v after the warm-up. blocked: refused by sluice (429);\n"+
		"dropped: arrivals the generator skipped because %d were outstanding; in flight: mean admitted requests in the handler;\n"+
		"svc p99: p99 of Entry to Exit; wait p99: p99 of client send to handler start (admitted requests);\n"+
		"cpu: the server's CPU usage (of %.2g CPUs; other processes on the host take the rest); ok/cpu-s: ok requests per\n"+
		"second of server CPU, which compares the runs when the neighbours leave the server more CPU in one than in the other.\n", *duration, *maxOut, limit)
	return nil
}

func round(d time.Duration) time.Duration {
	if d < 100*time.Millisecond {
		return d.Round(100 * time.Microsecond)
	}
	return d.Round(time.Millisecond)
}

// server is the service under test: an engine with its rules and an HTTP
// server on 127.0.0.1 whose handler burns CPU.
type server struct {
	url    string
	engine *sluice.Engine
	iters  int
	slice  int          // burn iterations per slice
	done   atomic.Int64 // requests completed by the handler (admitted or not)

	from, to atomic.Int64 // measured period, Unix nanoseconds
	mu       sync.Mutex
	svc      []time.Duration // Entry to Exit of admitted requests while measuring
	wait     []time.Duration // client send to handler start of the same
}

// withServer runs f against a fresh engine with rs in force, behind an HTTP
// server on 127.0.0.1, and shuts both down.
func withServer(ctx context.Context, rs []rules.System, iters int, f func(*server) error) error {
	// A short sample interval: BBR engages within ~100 ms of the CPU running
	// hot.
	g := sluice.New(sluice.WithSystemSampler(sluice.SystemSampler{Interval: 100 * time.Millisecond}))
	defer g.Close()
	if len(rs) == 0 && *trace {
		// The trace reads the inbound figures and the CPU usage, which an
		// engine counts and samples only under a system rule: a shadow rule
		// that nothing reaches has them kept without protecting anything.
		rs = []rules.System{{Metric: rules.CPUUsage, Threshold: 1, Shadow: true}}
	}
	if err := g.LoadRules(rules.Set{System: rs}); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s := &server{url: "http://" + ln.Addr().String() + "/work", engine: g, iters: iters}
	s.slice = max(1, int(int64(iters)*int64(*slice)/int64(*work)))
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if len(rs) > 0 {
		// Let the sampler take a first CPU reading.
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	dbgStop := make(chan struct{})
	dbgDone := make(chan struct{})
	go func() {
		defer close(dbgDone)
		if !*trace {
			return
		}
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		start := time.Now()
		for {
			select {
			case <-dbgStop:
				return
			case <-t.C:
				m := g.SystemMetrics()
				in := m.Inbound
				fmt.Fprintf(os.Stderr, "  %4.1fs cpu %.2f in flight %3d; last second: passed %4.0f, blocked %4.0f, completed %4.0f, min rt %v, avg rt %v\n",
					time.Since(start).Seconds(), m.CPUUsage, in.Concurrency, in.PassQPS, in.BlockQPS, in.CompleteQPS, round(in.MinRT), round(in.AvgRT))
			}
		}
	}()
	ferr := f(s)
	close(dbgStop)
	<-dbgDone
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
		<-served
		return errors.Join(ferr, err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return errors.Join(ferr, err)
	}
	return ferr
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer s.done.Add(1)
	arrived := time.Now()
	p, err := s.engine.Entry(resource)
	if err != nil {
		http.Error(w, "busy", http.StatusTooManyRequests)
		return
	}
	start := time.Now()
	var sum [32]byte
	if *slice > 0 {
		// Work in slices with a scheduling point between them, as a handler
		// that does I/O or hands data around has.
		for left := s.iters; left > 0; left -= s.slice {
			sum = burn(min(left, s.slice))
			runtime.Gosched()
		}
	} else {
		sum = burn(s.iters)
	}
	p.Exit()
	if t := start.UnixNano(); t >= s.from.Load() && t < s.to.Load() {
		svc := time.Since(start)
		var wait time.Duration
		if sent, err := strconv.ParseInt(r.Header.Get(sentHeader), 10, 64); err == nil {
			wait = arrived.Sub(time.Unix(0, sent))
		}
		s.mu.Lock()
		s.svc = append(s.svc, svc)
		s.wait = append(s.wait, wait)
		s.mu.Unlock()
	}
	_, _ = fmt.Fprintf(w, "%x\n", sum)
}

// serverStats is what the server saw of a run's measured period.
type serverStats struct {
	inFlight float64       // mean admitted requests in the handler (Σ service time / period)
	svcP99   time.Duration // p99 of Entry to Exit
	waitP99  time.Duration // p99 of client send to handler start, admitted requests
	cpu      float64       // the server's CPU usage
}

// measure makes the handler record requests that start in [from, from+d),
// and returns a function that returns what was recorded once the period is
// over.
func (s *server) measureFrom(from time.Time, d time.Duration) func() serverStats {
	s.from.Store(from.UnixNano())
	s.to.Store(from.Add(d).UnixNano())
	return func() serverStats {
		s.mu.Lock()
		defer s.mu.Unlock()
		var st serverStats
		var total time.Duration
		for _, v := range s.svc {
			total += v
		}
		st.inFlight = total.Seconds() / d.Seconds()
		st.svcP99 = p99(s.svc)
		st.waitP99 = p99(s.wait)
		return st
	}
}

func p99(v []time.Duration) time.Duration {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return v[min(len(v)-1, len(v)*99/100)]
}

// burn hashes a buffer iters times.
func burn(iters int) [32]byte {
	var sum [32]byte
	buf := make([]byte, 1024)
	for i := 0; i < iters; i++ {
		copy(buf, sum[:])
		sum = sha256.Sum256(buf)
	}
	return sum
}

// calibrateBurn returns the number of burn iterations that take about d of
// CPU. It keeps the fastest of several short trials: on a busy host, slower
// trials include time the process spent descheduled.
func calibrateBurn(d time.Duration) int {
	const n = 200
	best := time.Duration(1 << 62)
	for i := 0; i < 30; i++ {
		start := time.Now()
		burn(n)
		best = min(best, time.Since(start))
	}
	per := max(best/n, time.Nanosecond)
	return max(1, int(d/per))
}

// job is what the load generator child is asked to do: Clients closed-loop
// clients, or (Clients zero) Rate requests per second open loop with at most
// MaxOut outstanding, for Warmup and then Duration, recording only requests
// sent during Duration.
type job struct {
	URL              string
	Clients          int
	Rate             float64
	MaxOut           int
	Warmup, Duration time.Duration
}

// result is what the child reports, for the measured period.
type result struct {
	Sent, OK, Blocked, Dropped, Failed int64
	Elapsed                            time.Duration
	OKPerSec                           float64
	P50, P99, Max                      time.Duration
}

// generate runs the load generator child for j and returns its report. The
// child is killed if ctx ends or it overruns, and always waited for.
func generate(ctx context.Context, j job) (result, error) {
	exe, err := os.Executable()
	if err != nil {
		return result{}, err
	}
	spec, err := json.Marshal(j)
	if err != nil {
		return result{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, j.Warmup+j.Duration+20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), childEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	// The child reads its stdin until EOF: the pipe closes when this process
	// exits, however it exits, and then the child does too.
	if _, err := cmd.StdinPipe(); err != nil {
		return result{}, err
	}
	out, err := cmd.Output() // starts, waits, closes the pipe
	if err != nil {
		return result{}, fmt.Errorf("load generator: %w", err)
	}
	var r result
	if err := json.Unmarshal(out, &r); err != nil {
		return result{}, fmt.Errorf("load generator: %w", err)
	}
	return r, nil
}

// loadgen is the child's main: it runs the job in spec and prints its result
// as JSON on stdout.
func loadgen(spec string) error {
	var j job
	if err := json.Unmarshal([]byte(spec), &j); err != nil {
		return err
	}
	go func() { // the parent is gone: stop
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(2)
	}()
	var r result
	if j.Clients > 0 {
		r = closedLoop(j)
	} else {
		r = openLoop(j)
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}

func newClient(conns int) *http.Client {
	return &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns},
	}
}

// recorder collects the outcome of requests sent during the measurement.
type recorder struct {
	mu                    sync.Mutex
	lat                   []time.Duration // of successful requests
	sent, blocked, failed atomic.Int64
}

func (r *recorder) do(c *http.Client, url string, record bool) {
	start := time.Now()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		r.failed.Add(1)
		return
	}
	req.Header.Set(sentHeader, strconv.FormatInt(start.UnixNano(), 10))
	resp, err := c.Do(req)
	if !record {
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
		return
	}
	r.sent.Add(1)
	if err != nil {
		r.failed.Add(1)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		d := time.Since(start)
		r.mu.Lock()
		r.lat = append(r.lat, d)
		r.mu.Unlock()
	case http.StatusTooManyRequests:
		r.blocked.Add(1)
	default:
		r.failed.Add(1)
	}
}

func (r *recorder) result(elapsed time.Duration) result {
	r.mu.Lock()
	defer r.mu.Unlock()
	slices.Sort(r.lat)
	n := len(r.lat)
	res := result{
		Sent:     r.sent.Load(),
		OK:       int64(n),
		Blocked:  r.blocked.Load(),
		Failed:   r.failed.Load(),
		Elapsed:  elapsed,
		OKPerSec: float64(n) / elapsed.Seconds(),
	}
	if n > 0 {
		res.P50 = r.lat[n*50/100]
		res.P99 = r.lat[min(n-1, n*99/100)]
		res.Max = r.lat[n-1]
	}
	return res
}

// closedLoop runs j.Clients clients that each send requests back to back.
func closedLoop(j job) result {
	c := newClient(j.Clients)
	defer c.CloseIdleConnections()
	var rec recorder
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(j.Warmup + j.Duration)
	for i := 0; i < j.Clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for now := time.Now(); now.Before(end); now = time.Now() {
				rec.do(c, j.URL, now.Sub(start) >= j.Warmup)
			}
		}()
	}
	wg.Wait()
	return rec.result(j.Duration)
}

// openLoop offers j.Rate requests per second whatever the answers, with at
// most j.MaxOut outstanding; arrivals beyond that are dropped (a bounded
// generator: it never queues without limit itself). It waits for every
// request it sent.
func openLoop(j job) result {
	c := newClient(j.MaxOut)
	defer c.CloseIdleConnections()
	var rec recorder
	var wg sync.WaitGroup
	var dropped int64
	sem := make(chan struct{}, j.MaxOut)
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	sent := 0
	for now := range tick.C {
		el := now.Sub(start)
		if el >= j.Warmup+j.Duration {
			break
		}
		record := el >= j.Warmup
		for due := int(j.Rate * el.Seconds()); sent < due; sent++ {
			select {
			case sem <- struct{}{}:
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { <-sem }()
					rec.do(c, j.URL, record)
				}()
			default:
				if record {
					dropped++
				}
			}
		}
	}
	wg.Wait()
	res := rec.result(j.Duration)
	res.Dropped = dropped
	return res
}
