// Command watch shows watches: events when a metric of a resource over a
// sliding window of whole seconds crosses a threshold, and when it falls
// back.
//
// It starts an HTTP service on 127.0.0.1 guarded by sluicehttp, and two
// watches on its one route: errors reaching 20 in any 3 seconds, and 8
// requests in flight at once within any 2 seconds. Two clients call it for
// about 7 seconds; the service's dependency fails for the second second (every
// answer a 500; on a host so busy that fewer than 25 calls fail in that
// second, until 25 have), and a crowd of 12 more clients arrives in the fourth. Each
// watch event is printed as the engine delivers it, at the end of the
// second that completed the window: the errors watch fires after the
// outage and clears once the outage has left the 3-second window, the
// concurrency watch fires after the crowd and clears 2 seconds later. It
// exits 1 if a watch did not fire. Run it with:
//
//	go run ./examples/watch
package main

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
	sluicehttp "github.com/sluice-go/sluice/adapters/http"
	"github.com/sluice-go/sluice/stat"
)

const resource = "GET /orders"

func main() {
	if err := run(os.Stdout); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

func run(w io.Writer) error {
	// The events arrive on the engine's event goroutine while this one
	// prints too: one lock keeps their lines whole and the writer unshared.
	out := &lockedWriter{w: w}
	eng := sluice.New()
	defer eng.Close()
	start := time.Now()
	elapsed := func() time.Duration { return time.Since(start).Round(10 * time.Millisecond) }

	var fired [2]atomic.Bool
	watches := []stat.Watch{
		{Resource: resource, Metric: stat.MetricError, Window: 3 * time.Second, Threshold: 20},
		{Resource: resource, Metric: stat.MetricMaxConcurrency, Window: 2 * time.Second, Threshold: 8},
	}
	cancel := eng.Subscribe(func(ev stat.Event) {
		if ev.Kind != stat.EventWatchFired && ev.Kind != stat.EventWatchCleared {
			return
		}
		for i, w := range watches {
			if ev.Watch == w && ev.Kind == stat.EventWatchFired {
				fired[i].Store(true)
			}
		}
		fmt.Fprintf(out, "%7v  %-13s %s: %s %g in the %v up to %v of the engine's clock (threshold %g)\n",
			elapsed(), ev.Kind, ev.Resource, ev.Watch.Metric, ev.Value, ev.Watch.Window, time.Duration(ev.At), ev.Watch.Threshold)
	})
	defer cancel()
	for _, w := range watches {
		stop, err := eng.Watch(w)
		if err != nil {
			return err
		}
		defer stop()
	}

	// The service: 20 ms per order; its dependency is down from 1 s to 2 s,
	// and on past 2 s until 25 calls have failed: a busy host serves fewer
	// calls a second, and the errors watch needs 20 in 3 seconds.
	var outage atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc(resource, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond)
		if t := time.Since(start); t >= time.Second && (t < 2*time.Second || outage.Load() < 25) {
			outage.Add(1)
			http.Error(w, "dependency down", http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	srv := httptest.NewServer(sluicehttp.Middleware(eng)(mux))
	defer srv.Close()

	var sent, failed atomic.Int64
	call := func() {
		resp, err := srv.Client().Get(srv.URL + "/orders")
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		sent.Add(1)
		if resp.StatusCode >= 500 {
			failed.Add(1)
		}
	}
	client := func(from, until time.Duration) {
		time.Sleep(time.Until(start.Add(from)))
		for time.Since(start) < until {
			call()
		}
	}
	fmt.Fprintln(out, "elapsed  event")
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ { // steady traffic
		wg.Add(1)
		go func() { defer wg.Done(); client(0, 7*time.Second) }()
	}
	for i := 0; i < 12; i++ { // the crowd
		wg.Add(1)
		go func() { defer wg.Done(); client(3*time.Second, 3500*time.Millisecond) }()
	}
	wg.Wait()
	fmt.Fprintf(out, "%d requests, %d failed\n", sent.Load(), failed.Load())
	for i, w := range watches {
		if !fired[i].Load() {
			return fmt.Errorf("watch: the %s watch did not fire", w.Metric)
		}
	}
	return nil
}

// lockedWriter serialises the writes of the event goroutine and of run.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
