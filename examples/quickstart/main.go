// Command quickstart shows sluice protecting an HTTP service with a flow
// rule, end to end, on one machine with nothing but Go:
//
//	go run ./examples/quickstart
//
// It starts a small HTTP service on a free port of 127.0.0.1 whose route
// GET /orders is guarded by the sluicehttp middleware and a flow rule of
// 100 requests per second (reject beyond it). A built-in load generator then
// offers 300 requests per second for 5 seconds, from at most 32 requests in
// flight, and the program prints, second by second, how many requests passed
// (200), how many were refused (429 Too Many Requests), and the mean and p99
// response time of the ones that passed. It ends with a summary, shuts the
// server down gracefully and exits 0.
//
// Flags change the run:
//
//	-duration 5s   how long to drive load
//	-rate 300      requests offered per second
//	-limit 100     the flow rule's threshold, requests per second
//
// Ctrl-C stops the run early; the program still shuts everything down.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/sluice-go/sluice"
	sluicehttp "github.com/sluice-go/sluice/adapters/http"
	"github.com/sluice-go/sluice/rules"
)

// resource is the name the middleware gives requests routed by the
// "GET /orders" pattern: method, space, pattern without its method.
const resource = "GET /orders"

// Limits of the flags, so a typo cannot start a runaway generator.
const (
	maxDuration = time.Hour
	maxRate     = 10000
)

// config describes one run of the demo. Zero fields take the defaults of
// withDefaults.
type config struct {
	// Duration is how long load is offered. Zero means 5 s.
	Duration time.Duration
	// Rate is how many requests are offered per second, evenly spaced.
	// Zero means 300.
	Rate int
	// Limit is the flow rule's threshold, in requests per second. Zero
	// means 100.
	Limit float64
	// Concurrency bounds the requests in flight at once; a request whose
	// turn comes while all are busy is not sent and counted as dropped.
	// Zero means 32.
	Concurrency int
	// Work is how long the handler takes to serve a passed request. Zero
	// means 2 ms; a negative value means no simulated work.
	Work time.Duration
}

func (c config) withDefaults() config {
	if c.Duration == 0 {
		c.Duration = 5 * time.Second
	}
	if c.Rate == 0 {
		c.Rate = 300
	}
	if c.Limit == 0 {
		c.Limit = 100
	}
	if c.Concurrency == 0 {
		c.Concurrency = 32
	}
	if c.Work == 0 {
		c.Work = 2 * time.Millisecond
	}
	if c.Work < 0 {
		c.Work = 0
	}
	return c
}

func (c config) validate() error {
	switch {
	case c.Duration < 0 || c.Duration > maxDuration:
		return fmt.Errorf("quickstart: duration %v out of range (0 to %v)", c.Duration, maxDuration)
	case c.Rate < 0 || c.Rate > maxRate:
		return fmt.Errorf("quickstart: rate %d out of range (1 to %d requests per second)", c.Rate, maxRate)
	case c.Limit < 0 || math.IsNaN(c.Limit) || math.IsInf(c.Limit, 0):
		return fmt.Errorf("quickstart: limit %v must be a positive number of requests per second", c.Limit)
	case c.Concurrency < 0:
		return fmt.Errorf("quickstart: concurrency %d must be positive", c.Concurrency)
	}
	return nil
}

// second is what one second of the run saw, by the second in which each
// request was scheduled to be sent.
type second struct {
	Sent    int           // requests sent
	Passed  int           // answered 200
	Blocked int           // answered 429
	Failed  int           // any other status, or no response
	Dropped int           // not sent: all Concurrency requests were in flight
	MeanRT  time.Duration // mean response time of passed requests
	P99RT   time.Duration // 99th percentile response time of passed requests
}

// result is what a run saw, from the client's side and the engine's.
type result struct {
	Config  config        // the configuration run, defaults filled in
	Address string        // the server's address
	Elapsed time.Duration // how long load was offered: Config.Duration unless stopped early
	Seconds []second      // one per second of the run

	// Totals over the run, as the client saw them.
	Sent, Passed, Blocked, Failed, Dropped int
	// BlockedMeanRT is the mean response time of blocked requests.
	BlockedMeanRT time.Duration

	// EnginePassed and EngineBlocked are the engine's own counts for the
	// resource (stat.Snapshot.TotalPass and TotalBlock).
	EnginePassed, EngineBlocked uint64
}

func main() {
	var cf config
	flag.DurationVar(&cf.Duration, "duration", 5*time.Second, "how long to drive load")
	flag.IntVar(&cf.Rate, "rate", 300, "requests offered per second")
	flag.Float64Var(&cf.Limit, "limit", 100, "flow rule threshold, requests per second")
	flag.Parse()
	if cf.Duration <= 0 || cf.Rate <= 0 || cf.Limit <= 0 {
		fmt.Fprintln(os.Stderr, "quickstart: -duration, -rate and -limit must be positive")
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	cf = cf.withDefaults()
	fmt.Printf("sluice quickstart: %s limited to %s req/s by a flow rule; offering %d req/s for %v (at most %d in flight)\n\n",
		resource, num(cf.Limit), cf.Rate, cf.Duration, cf.Concurrency)
	res, err := run(ctx, cf)
	if res.Sent > 0 {
		report(os.Stdout, res)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		stop()
		os.Exit(1)
	}
	fmt.Printf("The server at %s was shut down gracefully.\n", res.Address)
}

// run starts the protected service, drives load at it for cf.Duration,
// shuts it down and returns what it saw. It returns an error if the service
// cannot start, if ctx ends early, or if any request got an answer other
// than 200 or 429. Everything it starts has stopped when it returns.
func run(ctx context.Context, cf config) (res result, err error) {
	cf = cf.withDefaults()
	if err := cf.validate(); err != nil {
		return result{}, err
	}
	res.Config = cf

	// Local mode: an engine of this process, with one flow rule.
	eng := sluice.New()
	defer eng.Close()
	if err := eng.LoadRules(rules.Set{Flow: []rules.Flow{{
		Resource:  resource,
		Threshold: cf.Limit,
		// Metric QPS, Strategy Direct and Behavior Reject are the zero values.
	}}}); err != nil {
		return result{}, err
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return result{}, fmt.Errorf("quickstart: listen: %w", err)
	}
	res.Address = ln.Addr().String()
	mux := http.NewServeMux()
	mux.Handle("GET /orders", orders(cf.Work))
	srv := &http.Server{
		Handler:           sluicehttp.Middleware(eng)(mux),
		ReadHeaderTimeout: 5 * time.Second,
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		serr := srv.Shutdown(sctx)
		if serr != nil {
			_ = srv.Close()
		}
		if e := <-served; !errors.Is(e, http.ErrServerClosed) && serr == nil {
			serr = e
		}
		if serr != nil && err == nil {
			err = fmt.Errorf("quickstart: shutdown: %w", serr)
		}
	}()

	samples, dropped, elapsed, lerr := load(ctx, "http://"+res.Address+"/orders", cf)
	res.Elapsed = elapsed
	res.tally(samples, dropped)
	if snap, ok := eng.Snapshot(resource); ok {
		res.EnginePassed, res.EngineBlocked = snap.TotalPass, snap.TotalBlock
	}
	if lerr != nil {
		return res, lerr
	}
	if res.Failed > 0 {
		return res, fmt.Errorf("quickstart: %d requests got neither 200 nor 429", res.Failed)
	}
	return res, nil
}

// orders is the protected handler: it takes work, then answers a small JSON
// body. It gives up early if the client goes away.
func orders(work time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if work > 0 {
			t := time.NewTimer(work)
			defer t.Stop()
			select {
			case <-t.C:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"orders":[{"id":1,"item":"tea"}]}`+"\n")
	})
}

// sample is one request the generator sent.
type sample struct {
	sec    int           // second of the run in which it was scheduled
	status int           // HTTP status; 0 when no response came
	rt     time.Duration // time from send to the end of the response body
}

// load offers cf.Rate requests per second to url for cf.Duration, open loop:
// request i is due at i/Rate seconds, whatever became of the earlier ones,
// and is sent by one of cf.Concurrency workers, or dropped (counted per
// second) when all are busy. It returns once every request sent has
// finished, with how long it offered load: cf.Duration, or less and
// ctx.Err() if ctx ended first.
func load(ctx context.Context, url string, cf config) (samples []sample, dropped []int, elapsed time.Duration, err error) {
	total := int(int64(cf.Duration) * int64(cf.Rate) / int64(time.Second))
	secs := int((cf.Duration + time.Second - 1) / time.Second)
	dropped = make([]int, secs)

	tr := &http.Transport{
		MaxIdleConnsPerHost: cf.Concurrency,
		MaxConnsPerHost:     cf.Concurrency,
		DisableCompression:  true,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}

	samples = make([]sample, 0, total)
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		jobs = make(chan int, cf.Concurrency) // scheduled second of each request
	)
	for range cf.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for sec := range jobs {
				s := send(ctx, client, url)
				s.sec = sec
				mu.Lock()
				samples = append(samples, s)
				mu.Unlock()
			}
		}()
	}

	// The pacer wakes at most every millisecond and sends every request
	// that has come due, so the offered count is exact whatever the timer's
	// jitter.
	tick := max(time.Second/time.Duration(cf.Rate), time.Millisecond)
	ticker := time.NewTicker(tick)
	start := time.Now()
	elapsed = cf.Duration
	for next := 0; next < total; {
		due := min(int(int64(time.Since(start))*int64(cf.Rate)/int64(time.Second))+1, total)
		for ; next < due; next++ {
			sec := next / cf.Rate
			select {
			case jobs <- sec:
			default:
				dropped[sec]++
			}
		}
		if next == total {
			break
		}
		select {
		case <-ctx.Done():
			err = fmt.Errorf("quickstart: stopped early: %w", ctx.Err())
			elapsed = min(time.Since(start), cf.Duration)
			next = total
		case <-ticker.C:
		}
	}
	ticker.Stop()
	close(jobs)
	wg.Wait()
	return samples, dropped, elapsed, err
}

// send makes one request and reads the whole response.
func send(ctx context.Context, client *http.Client, url string) sample {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return sample{}
	}
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return sample{rt: time.Since(t0)}
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	s := sample{status: resp.StatusCode, rt: time.Since(t0)}
	if err != nil {
		s.status = 0
	}
	return s
}

// tally fills the per-second and total figures of r from the samples.
func (r *result) tally(samples []sample, dropped []int) {
	r.Seconds = make([]second, len(dropped))
	rts := make([][]time.Duration, len(dropped))
	var blockedRT time.Duration
	for _, s := range samples {
		sec := &r.Seconds[s.sec]
		sec.Sent++
		switch s.status {
		case http.StatusOK:
			sec.Passed++
			rts[s.sec] = append(rts[s.sec], s.rt)
		case http.StatusTooManyRequests:
			sec.Blocked++
			blockedRT += s.rt
		default:
			sec.Failed++
		}
	}
	for i := range r.Seconds {
		sec := &r.Seconds[i]
		sec.Dropped = dropped[i]
		sec.MeanRT, sec.P99RT = meanP99(rts[i])
		r.Sent += sec.Sent
		r.Passed += sec.Passed
		r.Blocked += sec.Blocked
		r.Failed += sec.Failed
		r.Dropped += sec.Dropped
	}
	if r.Blocked > 0 {
		r.BlockedMeanRT = blockedRT / time.Duration(r.Blocked)
	}
}

// meanP99 returns the mean and the 99th percentile (nearest rank) of d,
// which it sorts; zeros when d is empty.
func meanP99(d []time.Duration) (mean, p99 time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	rank := int(math.Ceil(0.99*float64(len(d)))) - 1
	return sum / time.Duration(len(d)), d[rank]
}

// report prints the per-second table and the summary.
func report(out io.Writer, r result) {
	var table strings.Builder
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "second\tsent\tpassed (200)\tblocked (429)\tmean RT\tp99 RT\t")
	for i, s := range r.Seconds {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%s\t%s\t\n", i+1, s.Sent, s.Passed, s.Blocked, ms(s.MeanRT), ms(s.P99RT))
	}
	fmt.Fprintf(tw, "total\t%d\t%d\t%d\t\t\t\n", r.Sent, r.Passed, r.Blocked)
	_ = tw.Flush()
	for _, line := range strings.Split(strings.TrimSuffix(table.String(), "\n"), "\n") {
		fmt.Fprintln(out, strings.TrimRight(line, " "))
	}
	legend(out, r.Config.Limit)

	secs := r.Elapsed.Seconds()
	if secs <= 0 {
		secs = r.Config.Duration.Seconds()
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "limit:   %s req/s on %s (flow rule: QPS, reject)\n", num(r.Config.Limit), resource)
	fmt.Fprintf(out, "passed:  %d (%.1f req/s)\n", r.Passed, float64(r.Passed)/secs)
	fmt.Fprintf(out, "blocked: %d (%.1f req/s)\n", r.Blocked, float64(r.Blocked)/secs)
	if r.Failed > 0 {
		fmt.Fprintf(out, "failed:  %d (neither 200 nor 429)\n", r.Failed)
	}
	if r.Dropped > 0 {
		fmt.Fprintf(out, "dropped: %d not sent by the generator (all %d in flight)\n", r.Dropped, r.Config.Concurrency)
	}
	fmt.Fprintf(out, "engine:  counted %d passed and %d blocked on %s\n", r.EnginePassed, r.EngineBlocked, resource)
	fmt.Fprintln(out)

	if r.Blocked == 0 {
		fmt.Fprintf(out, "%d req/s were offered, within the limit of %s req/s: nothing was refused.\n",
			r.Config.Rate, num(r.Config.Limit))
		return
	}
	fmt.Fprintf(out, "%d req/s were offered against a limit of %s req/s: the flow rule let %.1f req/s through\n",
		r.Config.Rate, num(r.Config.Limit), float64(r.Passed)/secs)
	fmt.Fprintf(out, "and answered the excess with 429 at once (in %s on average), holding the handler to its limit.\n",
		ms(r.BlockedMeanRT))
}

// legend explains the table's seconds against the flow rule's window.
func legend(out io.Writer, limit float64) {
	fmt.Fprintln(out)
	fmt.Fprintln(out, "A row counts the requests due to be sent in that second of the run. The flow rule")
	fmt.Fprintf(out, "counts over a sliding window of ten 100 ms buckets: it admits at most %s requests in\n", num(limit))
	fmt.Fprintln(out, "any ten consecutive buckets, as the window sees them. A row's second is not aligned")
	fmt.Fprintf(out, "with the buckets, so it can show more than %s passed: passes from the bucket in which\n", num(limit))
	fmt.Fprintln(out, "it began leave the window before it ends. How far: see docs/design/architecture.md.")
}

// ms formats d in milliseconds with two decimals.
func ms(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}

// num formats a rate without needless decimals.
func num(f float64) string { return fmt.Sprintf("%g", f) }
