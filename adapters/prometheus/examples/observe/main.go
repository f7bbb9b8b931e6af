// Command observe is a small service guarded by sluice with its statistics
// on /metrics (package sluiceprom): GET /orders under a flow rule of 20
// requests per second, POST /pay behind a circuit breaker and a payment
// dependency that fails for the first part of the run. A load generator
// sends requests to it for a few seconds; then it scrapes its own /metrics,
// prints the sluice lines of a few metrics and exits. Everything listens on
// 127.0.0.1.
//
//	go run ./examples/observe              # from adapters/prometheus
//	go run ./examples/observe -duration 10s -keep 30s  # then curl the printed /metrics URL
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-go/sluice"
	sluicehttp "github.com/sluice-go/sluice/adapters/http"
	sluiceprom "github.com/sluice-go/sluice/adapters/prometheus"
	"github.com/sluice-go/sluice/rules"
)

func main() {
	duration := flag.Duration("duration", 3*time.Second, "how long the load generator runs (at most 1m)")
	keep := flag.Duration("keep", 0, "how long to keep serving /metrics after the load (at most 10m)")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, min(*duration, time.Minute), min(*keep, 10*time.Minute)); err != nil {
		log.Fatal(err)
	}
}

// shown are the metrics whose lines run prints.
var shown = []string{"sluice_passed_total", "sluice_blocked_total", "sluice_breaker_state", "sluice_breaker_transitions_total"}

// run serves the demo on loopback, loads it for duration, prints the
// lines of the shown metrics from its /metrics, keeps serving for keep,
// and stops everything it started before it returns.
func run(ctx context.Context, out io.Writer, duration, keep time.Duration) error {
	engine := sluice.New()
	defer engine.Close()
	if err := engine.LoadRules(rules.Set{
		Flow: []rules.Flow{{ID: "orders-qps", Resource: "GET /orders", Threshold: 20}},
		CircuitBreaker: []rules.CircuitBreaker{{ID: "pay-errors", Resource: "POST /pay", Strategy: rules.ErrorRatio,
			Threshold: 0.5, MinRequestAmount: 5, StatInterval: time.Second, RetryTimeout: 300 * time.Millisecond}},
	}); err != nil {
		return err
	}

	// The payment dependency fails for the first 40 % of the load.
	var payDown atomic.Bool
	payDown.Store(true)
	mux := http.NewServeMux()
	guard := sluicehttp.Middleware(engine)
	mux.Handle("GET /orders", guard(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "orders\n")
	})))
	mux.Handle("POST /pay", guard(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if payDown.Load() {
			http.Error(w, "payment provider down", http.StatusBadGateway)
			return
		}
		_, _ = io.WriteString(w, "paid\n")
	})))
	reg := prometheus.NewRegistry()
	reg.MustRegister(sluiceprom.NewCollector(engine))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	base := "http://" + lis.Addr().String()
	fmt.Fprintf(out, "serving %s/metrics; load for %v\n", base, duration)

	client := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
	counts := load(ctx, client, base, duration, &payDown)
	fmt.Fprintf(out, "sent %d requests: %d ok, %d refused (429/503), %d failed\n", counts[0]+counts[1]+counts[2], counts[0], counts[1], counts[2])

	lines, err := scrape(ctx, client, base+"/metrics")
	if err == nil {
		for _, l := range lines {
			fmt.Fprintln(out, l)
		}
		if keep > 0 {
			fmt.Fprintf(out, "serving %s/metrics for %v more\n", base, keep)
			select {
			case <-time.After(keep):
			case <-ctx.Done():
			}
		}
	}
	// The transport may hold connections dialed for requests the end of the
	// load cancelled, never used: the server counts them as new, not idle,
	// and Shutdown would wait for them.
	client.CloseIdleConnections()
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if serr := srv.Shutdown(shutdown); serr != nil && err == nil {
		err = serr
	}
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// load sends requests to base from four goroutines for duration (each
// paced by a millisecond, so at most about 4,000 a second), and returns
// how many came back 2xx, refused (429, 503) and otherwise.
func load(ctx context.Context, client *http.Client, base string, duration time.Duration, payDown *atomic.Bool) [3]int64 {
	ctx, cancel := context.WithTimeout(ctx, duration)
	defer cancel()
	heal := time.AfterFunc(duration*4/10, func() { payDown.Store(false) })
	defer heal.Stop()
	var counts [3]atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				method, path := http.MethodGet, "/orders"
				if (w+i)%2 == 1 {
					method, path = http.MethodPost, "/pay"
				}
				req, err := http.NewRequestWithContext(ctx, method, base+path, nil)
				if err != nil {
					return
				}
				resp, err := client.Do(req)
				if err != nil {
					continue // the context ended mid-request
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch {
				case resp.StatusCode < 300:
					counts[0].Add(1)
				case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable:
					counts[1].Add(1)
				default:
					counts[2].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return [3]int64{counts[0].Load(), counts[1].Load(), counts[2].Load()}
}

// scrape returns the sample lines of the shown metrics at url.
func scrape(ctx context.Context, client *http.Client, url string) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	var lines []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		for _, m := range shown {
			if strings.HasPrefix(l, m+"{") || strings.HasPrefix(l, m+" ") {
				lines = append(lines, l)
			}
		}
	}
	return lines, sc.Err()
}
