package lease

import (
	"testing"
	"time"
)

// TestPaybackCountsTheProbingCall: the local decision that queues the
// probe is charged in the probe's payback, however the store goroutine that
// runs the probe is scheduled against the caller. Before, the probe was
// queued ahead of the decision, and a store goroutine that probed and paid
// back first charged one admission less (TestPaybackOnRecovery failed about
// once in 40 to 200 runs on a loaded host). Each round is a new Manager: one
// admission by the local share while the Store fails, then the call that
// queues the probe; the Store must be charged both, times the 4 live
// instances the shares divide by.
func TestPaybackCountsTheProbingCall(t *testing.T) {
	rounds := 400
	if testing.Short() {
		rounds = 50
	}
	for i := range rounds {
		e := newEnv(t, Config{ProbeInterval: 100 * time.Millisecond})
		e.m.SetLive(4)
		l := e.limiter(t, Spec{Budget: window("w", 100)})
		e.st.set(fail)
		if r := l.acq(bg, 1); !r.Admitted || !r.Fallback() || e.m.Mode() != Fallback {
			t.Fatalf("round %d: %+v in mode %v, want admitted by the local share in Fallback", i, r, e.m.Mode())
		}
		e.st.set(answer)
		e.clk.Advance(100 * time.Millisecond)
		if r := l.acq(bg, 1); !r.Admitted || !r.Fallback() { // queues the probe
			t.Fatalf("round %d: the probing call %+v, want admitted by the local share", i, r)
		}
		e.m.waitIdle()
		if e.m.Mode() != Remote {
			t.Fatalf("round %d: mode %v after the probe", i, e.m.Mode())
		}
		if _, granted, _ := e.st.counts("w"); granted != 8 {
			t.Fatalf("round %d: the Store was charged %d, want 2 local admissions × 4 = 8", i, granted)
		}
		e.st.release()
		if err := e.m.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
