package lease

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/internal/clock"
	"github.com/sluice-go/sluice/internal/sluicetest"
)

// benchEnv is a Manager and a quiet memStore on the system clock.
func benchEnv(b *testing.B) (*Manager, *memStore) {
	b.Helper()
	st := newMemStore(clock.System())
	st.quiet = true
	m, err := New(Config{Store: st})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.Close() })
	return m, st
}

func benchLimiter(b *testing.B, spec Spec) *Limiter {
	b.Helper()
	m, _ := benchEnv(b)
	l, err := m.NewLimiter(spec)
	if err != nil {
		b.Fatal(err)
	}
	if r := l.acq(bg, 1); !r.Admitted { // the first lease
		b.Fatalf("%+v", r)
	}
	return l
}

// big is a budget no benchmark exhausts: leases of up to 5·10^11 permits.
var big = cluster.Budget{Key: "bench", Algorithm: cluster.TokenBucket, Limit: 1e12, Interval: time.Second}

// BenchmarkAtomicAdd is the baseline the lease's admission is measured
// against.
func BenchmarkAtomicAdd(b *testing.B) {
	var x atomic.Int64
	b.ReportAllocs()
	for range b.N {
		x.Add(1)
	}
}

func BenchmarkAtomicAddParallel(b *testing.B) {
	var x atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			x.Add(1)
		}
	})
}

// BenchmarkLeaseAcquire: an admission from a lease, given the clock
// reading the engine takes once per entry (refreshed every 1024 calls
// here), refills included.
func BenchmarkLeaseAcquire(b *testing.B) {
	l := benchLimiter(b, Spec{Budget: big})
	clk := l.clock
	now := clk.Nanotime()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if i&1023 == 0 {
			now = clk.Nanotime()
		}
		if !l.Acquire(bg, now, 1).Admitted {
			b.Fatal("refused")
		}
	}
}

func BenchmarkLeaseAcquireParallel(b *testing.B) {
	l := benchLimiter(b, Spec{Budget: big})
	clk := l.clock
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		now := clk.Nanotime()
		for i := 0; pb.Next(); i++ {
			if i&1023 == 0 {
				now = clk.Nanotime()
			}
			if !l.Acquire(bg, now, 1).Admitted {
				b.Error("refused")
				return
			}
		}
	})
}

// BenchmarkLeaseAcquireClock reads the system clock for every admission:
// what a caller without a reading of its own pays.
func BenchmarkLeaseAcquireClock(b *testing.B) {
	l := benchLimiter(b, Spec{Budget: big})
	clk := l.clock
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if !l.Acquire(bg, clk.Nanotime(), 1).Admitted {
			b.Fatal("refused")
		}
	}
}

// BenchmarkPacingLeaseAcquire: an admission from a Pacing lease (the
// permits are due ever later; the benchmark does not sleep them).
func BenchmarkPacingLeaseAcquire(b *testing.B) {
	p := big
	p.Algorithm = cluster.Pacing
	p.MaxQueue = time.Hour
	l := benchLimiter(b, Spec{Budget: p})
	clk := l.clock
	now := clk.Nanotime()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if i&1023 == 0 {
			now = clk.Nanotime()
		}
		l.Acquire(bg, now, 1)
	}
}

// BenchmarkStrict: strict requests from 1, 2 and 64 goroutines on an
// in-memory Store answering at once, and after 1 ms as a round trip to a
// Redis would (rtt-µs reports the Take calls' measured duration): the cost
// of queueing and coalescing per request, and how many requests share a
// Take.
func BenchmarkStrict(b *testing.B) {
	for _, rtt := range []time.Duration{0, time.Millisecond} {
		for _, g := range []int{1, 2, 64} {
			b.Run("rtt="+rtt.String()+"/goroutines="+itoa(g), func(b *testing.B) {
				m, st := benchEnv(b)
				if rtt > 0 {
					st.delay = rtt
					st.set(slow)
				}
				l, err := m.NewLimiter(Spec{Budget: big, Strict: true})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.ResetTimer()
				var wg sync.WaitGroup
				per := b.N / g
				for i := 0; i < g; i++ {
					n := per
					if i == 0 {
						n += b.N % g
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range n {
							if !l.acq(bg, 1).Admitted {
								b.Error("refused")
								return
							}
						}
					}()
				}
				wg.Wait()
				b.StopTimer()
				m.waitIdle()
				takes, _, _ := st.counts(big.Key)
				b.ReportMetric(float64(b.N)/float64(max(takes, 1)), "reqs/take")
				b.ReportMetric(float64(m.rtt.Load())/1e3, "rtt-µs")
			})
		}
	}
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

// TestLeaseAcquireAllocs: an admission from a lease allocates nothing.
func TestLeaseAcquireAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocations")
	}
	e := &env{clk: sluicetest.NewManualClock(0)}
	e.st = newMemStore(e.clk)
	m, err := New(Config{Store: e.st, Clock: e.clk})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, b := range []cluster.Budget{big, {Key: "p", Algorithm: cluster.Pacing, Limit: 1e9, Interval: time.Second, MaxQueue: time.Hour}} {
		l, err := m.NewLimiter(Spec{Budget: b})
		if err != nil {
			t.Fatal(err)
		}
		l.acq(bg, 1)
		m.waitIdle()
		if a := testing.AllocsPerRun(1000, func() {
			if !l.Acquire(bg, 0, 1).Admitted {
				t.Fatal("refused")
			}
		}); a != 0 {
			t.Fatalf("%v: %v allocations per admission", b.Algorithm, a)
		}
	}
}
