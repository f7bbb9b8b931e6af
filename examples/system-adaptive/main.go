// Command system-adaptive shows system adaptive protection on a real
// workload: an HTTP service whose handler burns CPU is driven past
// saturation by a built-in open-loop load generator, twice: once without
// protection and once with a CPU-usage BBR rule. It prints throughput,
// p50/p99 latency and blocked counts for both runs and exits 0.
//
// Without protection the excess requests queue (in the listen backlog, the
// Go scheduler, the handler), so latency grows with the backlog. With the
// rule, once CPU usage is over the threshold the engine admits only as many
// requests as the process has shown it can complete (maxCompleted/s × min
// RT, Little's law) and refuses the rest at once with 429, so admitted
// requests keep a short, bounded latency while throughput stays near the
// peak.
//
// Everything runs on 127.0.0.1 in this process, in about 12 seconds:
//
//	go run ./examples/system-adaptive
package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/stat"
)

const resource = "GET /work"

var (
	work      = flag.Duration("work", 5*time.Millisecond, "CPU time each request burns")
	duration  = flag.Duration("duration", 4*time.Second, "length of each run")
	overload  = flag.Float64("overload", 2, "offered load as a multiple of the measured peak throughput")
	threshold = flag.Float64("cpu", 0, "CPU usage threshold of the BBR rule (ratio of the CPU the process may use); 0 means 0.75 × the usage measured at peak")
	maxOut    = flag.Int("outstanding", 256, "most requests the generator keeps in flight; further arrivals are dropped")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

func run() error {
	iters := calibrateBurn(*work)
	limit, _ := stat.NewHostSource(stat.HostConfig{}).CPULimit()
	fmt.Printf("handler burns ~%v of CPU per request; GOMAXPROCS %d, CPU limit %.2g CPUs\n", *work, runtime.GOMAXPROCS(0), limit)

	// Peak: a few closed-loop clients on an unprotected server, and the CPU
	// usage the process reaches when saturated on this host (on a shared
	// host it can be well below 1: other processes take their share).
	host := stat.NewHostSource(stat.HostConfig{})
	peak, err := withServer(nil, iters, func(url string, _ *sluice.Engine) (result, error) {
		_, _ = host.CPUUsage() // start of the measurement
		res := closedLoop(url, 2*runtime.GOMAXPROCS(0), time.Second)
		res.cpu, _ = host.CPUUsage()
		return res, nil
	})
	if err != nil {
		return err
	}
	rate := peak.okPerSec * *overload
	fmt.Printf("peak: %.0f req/s at CPU usage %.2f (closed loop, %d clients)\noffered load: %.0f req/s open loop for %v, at most %d outstanding\n\n",
		peak.okPerSec, peak.cpu, 2*runtime.GOMAXPROCS(0), rate, *duration, *maxOut)
	if *threshold <= 0 {
		*threshold = min(1, max(0.05, 0.75*peak.cpu))
	}

	rule := rules.System{ID: "cpu-bbr", Metric: rules.CPUUsage, Threshold: *threshold, Strategy: rules.BBR}
	runs := []struct {
		name  string
		rules []rules.System
	}{
		{"unprotected", nil},
		{fmt.Sprintf("cpu bbr > %.2g", *threshold), []rules.System{rule}},
	}
	fmt.Printf("%-16s %8s %9s %9s %9s %9s %9s\n", "run", "ok/s", "p50", "p99", "blocked", "dropped", "cpu")
	for _, r := range runs {
		res, err := withServer(r.rules, iters, func(url string, g *sluice.Engine) (result, error) {
			res := openLoop(url, rate, *duration, *maxOut)
			res.cpu = g.SystemMetrics().CPUUsage
			return res, nil
		})
		if err != nil {
			return err
		}
		cpu := "-"
		if res.cpu == res.cpu { // not NaN: the sampler ran
			cpu = fmt.Sprintf("%.2f", res.cpu)
		}
		fmt.Printf("%-16s %8.0f %9v %9v %9d %9d %9s\n", r.name, res.okPerSec,
			res.p50.Round(100*time.Microsecond), res.p99.Round(100*time.Microsecond), res.blocked, res.dropped, cpu)
		if res.errors > 0 {
			fmt.Printf("%-16s %d requests failed\n", "", res.errors)
		}
	}
	fmt.Println("\nblocked: refused by sluice (429); dropped: arrivals the generator skipped because", *maxOut, "were outstanding")
	return nil
}

// withServer runs f against a fresh engine with rs in force, behind an HTTP
// server on 127.0.0.1, and shuts both down.
func withServer(rs []rules.System, iters int, f func(url string, g *sluice.Engine) (result, error)) (result, error) {
	g := sluice.New(sluice.WithSystemSampleInterval(100 * time.Millisecond))
	defer g.Close()
	if _, err := g.LoadSystemRules(rs); err != nil {
		return result{}, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return result{}, err
	}
	srv := &http.Server{Handler: handler(g, iters), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	if len(rs) > 0 {
		time.Sleep(200 * time.Millisecond) // let the sampler take a first CPU reading
	}
	res, ferr := f("http://"+ln.Addr().String()+"/work", g)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		return res, err
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return res, err
	}
	return res, ferr
}

func handler(g *sluice.Engine, iters int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := g.Entry(resource)
		if err != nil {
			http.Error(w, "busy", http.StatusTooManyRequests)
			return
		}
		defer p.Exit()
		_, _ = fmt.Fprintf(w, "%x\n", burn(iters))
	})
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

type result struct {
	okPerSec                 float64
	p50, p99                 time.Duration
	blocked, dropped, errors int64
	cpu                      float64
}

func newClient(conns int) *http.Client {
	return &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns},
	}
}

// recorder collects the outcome of requests.
type recorder struct {
	mu              sync.Mutex
	lat             []time.Duration // of successful requests
	blocked, failed atomic.Int64
}

func (r *recorder) do(c *http.Client, url string) {
	start := time.Now()
	resp, err := c.Get(url)
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
	res := result{
		okPerSec: float64(len(r.lat)) / elapsed.Seconds(),
		blocked:  r.blocked.Load(),
		errors:   r.failed.Load(),
	}
	if n := len(r.lat); n > 0 {
		res.p50 = r.lat[n*50/100]
		res.p99 = r.lat[min(n-1, n*99/100)]
	}
	return res
}

// closedLoop runs n clients that each send requests back to back for d.
func closedLoop(url string, n int, d time.Duration) result {
	c := newClient(n)
	defer c.CloseIdleConnections()
	var rec recorder
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < d {
				rec.do(c, url)
			}
		}()
	}
	wg.Wait()
	return rec.result(time.Since(start))
}

// openLoop offers rate requests per second for d, whatever the answers,
// with at most maxOut outstanding; arrivals beyond that are dropped (a
// bounded generator: it never queues without limit itself). It waits for
// every request it sent.
func openLoop(url string, rate float64, d time.Duration, maxOut int) result {
	c := newClient(maxOut)
	defer c.CloseIdleConnections()
	var rec recorder
	var wg sync.WaitGroup
	var dropped int64
	sem := make(chan struct{}, maxOut)
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	sent := 0
	for now := range tick.C {
		el := now.Sub(start)
		if el >= d {
			break
		}
		for due := int(rate * el.Seconds()); sent < due; sent++ {
			select {
			case sem <- struct{}{}:
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { <-sem }()
					rec.do(c, url)
				}()
			default:
				dropped++
			}
		}
	}
	wg.Wait()
	res := rec.result(d)
	res.dropped = dropped
	return res
}
