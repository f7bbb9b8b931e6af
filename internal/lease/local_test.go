package lease

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-go/sluice/cluster"
)

// TestLocalBucket: the local token bucket is x/time/rate's AllowN: full at
// first, then rate per ns, never above capacity.
func TestLocalBucket(t *testing.T) {
	lc := newLocalLimiter(&Spec{Budget: cluster.Budget{Key: "k", Algorithm: cluster.TokenBucket, Limit: 100, Burst: 10, Interval: time.Second}})
	ms := int64(time.Millisecond)
	for i := 0; i < 10; i++ {
		if r := lc.allow(0, 1, 1); !r.Admitted {
			t.Fatalf("burst call %d refused", i)
		}
	}
	if r := lc.allow(0, 1, 1); r.Admitted || r.RetryAfter != 10*time.Millisecond {
		t.Fatalf("11th: %+v, want retry after 10ms", r)
	}
	if r := lc.allow(10*ms, 1, 1); !r.Admitted {
		t.Fatalf("after 10ms: %+v", r)
	}
	if r := lc.allow(10*ms, 11, 1); r.Admitted || r.RetryAfter != 0 {
		t.Fatalf("more than the capacity: %+v, want refused for good", r)
	}
	if r := lc.allow(10*ms+int64(time.Hour), 10, 1); !r.Admitted {
		t.Fatalf("after an hour: %+v, want a full bucket", r)
	}
	// Two instances: half the rate and half the burst.
	if r := lc.allow(20*ms+int64(time.Hour), 6, 2); r.Admitted {
		t.Fatalf("6 of a halved capacity of 5 admitted")
	}
}

// TestLocalWindow: no window of Interval ever holds more than the share,
// and the sub-window rounding refuses little.
func TestLocalWindow(t *testing.T) {
	const share = 10
	b := cluster.Budget{Key: "k", Algorithm: cluster.SlidingWindow, Limit: share, Interval: time.Second}
	lc := newLocalLimiter(&Spec{Budget: b})
	rng := rand.New(rand.NewPCG(7, 11))
	var admitted []int64
	now := int64(0)
	for now < int64(20*time.Second) {
		now += rng.Int64N(int64(40 * time.Millisecond)) // about 50 calls a second
		if r := lc.allow(now, 1, 1); r.Admitted {
			admitted = append(admitted, now)
		} else if r.RetryAfter <= 0 || r.RetryAfter > b.Interval+b.Interval/10 {
			t.Fatalf("at %v: %+v", time.Duration(now), r)
		}
	}
	for i, a := range admitted {
		in := 0
		for j := i; j >= 0 && admitted[j] > a-int64(b.Interval); j-- {
			in++
		}
		if in > share {
			t.Fatalf("%d admitted in the second before %v", in, time.Duration(a))
		}
	}
	if len(admitted) < 20*share*9/10 {
		t.Fatalf("admitted %d in 20s, want at least 90%% of %d", len(admitted), 20*share)
	}
}

// TestLocalPacing: the local pacer spaces permits Interval/share apart and
// queues at most MaxQueue.
func TestLocalPacing(t *testing.T) {
	b := cluster.Budget{Key: "k", Algorithm: cluster.Pacing, Limit: 100, Interval: time.Second, MaxQueue: 50 * time.Millisecond}
	lc := newLocalLimiter(&Spec{Budget: b})
	for i := 0; i <= 5; i++ {
		if r := lc.allow(0, 1, 1); !r.Admitted || r.Wait != time.Duration(i)*10*time.Millisecond {
			t.Fatalf("call %d: %+v", i, r)
		}
	}
	if r := lc.allow(0, 1, 1); r.Admitted || r.RetryAfter != 10*time.Millisecond {
		t.Fatalf("7th: %+v", r)
	}
	if r := lc.allow(int64(time.Second), 1, 2); !r.Admitted || r.Wait != 0 {
		t.Fatalf("a second later: %+v", r)
	}
	if r := lc.allow(int64(time.Second), 1, 2); !r.Admitted || r.Wait != 20*time.Millisecond {
		t.Fatalf("with 2 instances: %+v, want 20ms apart", r)
	}
}

// TestLocalWindowShareBelowOne: a sliding-window share below one permit per
// Interval (a 5/s limit over ten instances, or ExpectedInstances before the
// fleet was counted) admits single permits Interval/share apart, the
// share's average rate, rather than nothing at all: over 20 s a share of
// 0.5/s admits 10, never two within 2 s, and a batch of 2 never.
func TestLocalWindowShareBelowOne(t *testing.T) {
	b := cluster.Budget{Key: "k", Algorithm: cluster.SlidingWindow, Limit: 5, Interval: time.Second}
	lc := newLocalLimiter(&Spec{Budget: b})
	const live = 10 // share 0.5 per second
	step := int64(2 * time.Second)
	var admitted []int64
	for now := int64(0); now < int64(20*time.Second); now += int64(5 * time.Millisecond) {
		r := lc.allow(now, 1, live)
		if r.Admitted {
			admitted = append(admitted, now)
			continue
		}
		if r.RetryAfter <= 0 || r.RetryAfter > time.Duration(step) {
			t.Fatalf("at %v: %+v, want a retry within %v", time.Duration(now), r, time.Duration(step))
		}
	}
	if len(admitted) != 10 {
		t.Fatalf("admitted %d in 20 s (%v), want 10", len(admitted), admitted)
	}
	for i := 1; i < len(admitted); i++ {
		if admitted[i]-admitted[i-1] < step {
			t.Fatalf("admissions at %v and %v, less than %v apart", time.Duration(admitted[i-1]), time.Duration(admitted[i]), time.Duration(step))
		}
	}
	if r := lc.allow(int64(time.Hour), 2, live); r.Admitted || r.RetryAfter != 0 {
		t.Fatalf("a batch of 2 over a share of 0.5: %+v, want refused for good", r)
	}
}
