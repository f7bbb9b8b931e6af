package sluiceprom_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-go/sluice"
	sluiceprom "github.com/sluice-go/sluice/adapters/prometheus"
	"github.com/sluice-go/sluice/rules"
)

// benchResources is the number of resources with traffic and rules each
// scrape reads (one flow rule and one breaker each).
const benchResources = 100

// benchEngine returns an engine with benchResources resources, each with a
// passing flow rule and a closed breaker, and some traffic on each.
func benchEngine(b *testing.B) *sluice.Engine {
	b.Helper()
	g := sluice.New()
	b.Cleanup(func() { _ = g.Close() })
	var fl []rules.Flow
	var cb []rules.CircuitBreaker
	for i := 0; i < benchResources; i++ {
		r := fmt.Sprintf("GET /r%d", i)
		fl = append(fl, rules.Flow{Resource: r, Threshold: 1e12})
		cb = append(cb, rules.CircuitBreaker{Resource: r, Strategy: rules.ErrorRatio, Threshold: 0.5, RetryTimeout: time.Second})
	}
	if err := g.UpdateRules(func(s *rules.Set) { s.Flow = fl }); err != nil {
		b.Fatal(err)
	}
	if err := g.UpdateRules(func(s *rules.Set) { s.CircuitBreaker = cb }); err != nil {
		b.Fatal(err)
	}
	for _, r := range fl {
		p, err := g.Entry(r.Resource)
		if err != nil {
			b.Fatal(err)
		}
		p.Exit()
	}
	return g
}

// scrapeLoop registers a collector of g and gathers it in a loop on its own
// goroutine, pausing pause between scrapes, until the returned stop is
// called (stop waits for the goroutine and returns the number of scrapes).
func scrapeLoop(b *testing.B, g *sluice.Engine, pause time.Duration) (stop func() int) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(sluiceprom.NewCollector(g))
	if _, err := reg.Gather(); err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	n := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := reg.Gather(); err != nil {
				panic(err)
			}
			n++
			if pause > 0 {
				time.Sleep(pause)
			}
		}
	}()
	return func() int { close(done); wg.Wait(); return n }
}

// BenchmarkEntryExit is Entry+Exit on one of 100 resources (flow rule and
// breaker each) without a collector (scrape=off), with one gathered every
// 10 ms by another goroutine (scrape=10ms, 1,500 times Prometheus's
// default rate of one per 15 s), and gathered back to back (scrape=loop,
// which takes a CPU of its own). B/op and allocs/op count the whole
// process, so with a scraper they include the scrapes' allocations; the
// entry path itself allocates nothing. Compare in one run:
//
//	go test -run '^$' -bench EntryExit -benchmem -count 10 . | tee bench.txt
//	benchstat -col /scrape bench.txt
func BenchmarkEntryExit(b *testing.B) {
	for _, sc := range []struct {
		name  string
		on    bool
		pause time.Duration
	}{{"off", false, 0}, {"10ms", true, 10 * time.Millisecond}, {"loop", true, 0}} {
		for _, parallel := range []bool{false, true} {
			mode := "serial"
			if parallel {
				mode = "parallel"
			}
			b.Run("scrape="+sc.name+"/"+mode, func(b *testing.B) {
				g := benchEngine(b)
				if sc.on {
					stop := scrapeLoop(b, g, sc.pause)
					defer func() { b.ReportMetric(float64(stop()), "scrapes") }()
				}
				b.ReportAllocs()
				b.ResetTimer()
				if !parallel {
					for i := 0; i < b.N; i++ {
						p, err := g.Entry("GET /r7")
						if err != nil {
							b.Fatal(err)
						}
						p.Exit()
					}
					return
				}
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						p, err := g.Entry("GET /r7")
						if err != nil {
							b.Fatal(err)
						}
						p.Exit()
					}
				})
			})
		}
	}
}

// BenchmarkGather is one scrape of an engine with 100 resources, each with
// a flow rule and a breaker.
func BenchmarkGather(b *testing.B) {
	g := benchEngine(b)
	reg := prometheus.NewRegistry()
	reg.MustRegister(sluiceprom.NewCollector(g))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := reg.Gather(); err != nil {
			b.Fatal(err)
		}
	}
}
