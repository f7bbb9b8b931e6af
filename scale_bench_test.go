package sluice

import (
	"fmt"
	"math/rand"
	"slices"
	"sync"
	"testing"
	"time"
)

// BenchmarkScaleRatio reports Entry+Exit (one passing QPS rule per
// resource) over n resources as a ratio to the same calls on one resource
// (metric x-one; budget: 10,000 within 2x, 100,000 within 3x), serially
// and from two goroutines, for a round-robin walk (every call's resource is
// cold) and a Zipf walk (s = 1.1). On a shared, busy host a plain ns/op
// mixes in whatever else ran; here the two configurations alternate in
// chunks of calls, and the ratio is of the median chunk times, so both
// see the same host. b.N counts chunk pairs. (It reports no allocations:
// starting the goroutines of a chunk allocates; BenchmarkManyResources
// shows the calls allocate nothing.)
func BenchmarkScaleRatio(b *testing.B) {
	const chunk = 2000
	for _, n := range []int{10000, 100000} {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("GET /api/v1/items/%d", i)
		}
		g := benchEngine(b, names...)
		one := []string{names[n/2]}
		z := rand.NewZipf(rand.New(rand.NewSource(1)), 1.1, 1, uint64(n-1))
		zipf := make([]string, 1<<16)
		for i := range zipf {
			zipf[i] = names[z.Uint64()]
		}
		for _, w := range []struct {
			name  string
			order []string
		}{{"rr", names}, {"zipf", zipf}} {
			for _, par := range []int{1, 2} {
				b.Run(fmt.Sprintf("resources=%d/walk=%s/goroutines=%d", n, w.name, par), func(b *testing.B) {
					var pos [2]int
					run := func(order []string, k int) time.Duration {
						start := time.Now()
						var wg sync.WaitGroup
						for gr := 0; gr < par; gr++ {
							from := pos[k] + gr*len(order)/2
							wg.Add(1)
							go func() {
								defer wg.Done()
								for i := 0; i < chunk; i++ {
									p, err := g.Entry(order[(from+i)%len(order)])
									if err != nil {
										b.Error(err)
										return
									}
									p.Exit()
								}
							}()
						}
						wg.Wait()
						pos[k] += chunk
						return time.Since(start)
					}
					base := make([]time.Duration, 0, b.N)
					many := make([]time.Duration, 0, b.N)
					for i := 0; i < b.N; i++ {
						base = append(base, run(one, 0))
						many = append(many, run(w.order, 1))
					}
					slices.Sort(base)
					slices.Sort(many)
					mb, mm := base[len(base)/2], many[len(many)/2]
					b.ReportMetric(float64(mm)/float64(mb), "x-one")
					b.ReportMetric(float64(mb)/float64(chunk*par), "ns/call-one")
					b.ReportMetric(float64(mm)/float64(chunk*par), "ns/call-many")
				})
			}
		}
	}
}
