// Package lease is the engine side of budgets shared by every instance of a
// service through a cluster.Store ("5,000/s for this API in total", "20
// posts per hour per user, whichever pod serves them"): leases of permits
// for speed, strict per-call requests for exactness, a breaker that turns
// Store failures into local decisions, and a heartbeat that counts the live
// instances. It depends on cluster and core only.
//
// # Use
//
// An engine builds one Manager per Store, one Limiter per shared budget
// (rule, or rule and parameter value), and asks the Limiter on every entry,
// passing the clock reading it took for the entry:
//
//	m, _ := lease.New(lease.Config{Store: store, Clock: clk, OnTransition: report})
//	hb, _ := lease.StartHeartbeat(lease.HeartbeatConfig{Store: store, Clock: clk, Member: me, OnLive: m.SetLive, OnShare: m.SetShare})
//	l, _ := m.NewLimiter(lease.Spec{Budget: cluster.Budget{Key: "api", Algorithm: cluster.TokenBucket, Limit: 5000, Interval: time.Second}})
//	r := l.Acquire(ctx, ec.Start, 1) // r.Admitted, r.Wait, r.RetryAfter, r.By
//	...
//	l.Close()  // the rule changed or went away: unused permits go back
//	hb.Close()
//	m.Close()  // every Limiter's unused permits go back
//
// # Leases
//
// A Limiter takes permits from the Store in leases: one Take of k permits
// (Partial, so a short Store gives what it has), which it then hands out
// locally. An admission from a lease is a compare-and-swap on the lease's
// counter (a Pacing lease's: the index of its next permit) and a few loads,
// with no clock read (the caller passes now) and no allocation.
//
// A lease lives for its lifetime L (Spec.Lifetime, by default Interval/10):
// a count lease's permits are unusable L after its grant arrived (a
// sliding window's also outside the aligned interval of its grant, see
// Accuracy); a Pacing permit that is more than L past due is skipped. Unused permits go back
// with Store.Give when a lease expires or is replaced, when the Limiter is
// closed (rule change or removal) and when the Manager closes, except those
// the Store cannot take back (a sliding window's once their aligned
// interval is about to end, see Accuracy; Pacing permits already due) and
// those held when the Store failed; these are dropped and counted in
// ManagerStats.Dropped.
//
// Sizing. Let N be the live instance count (Manager.SetLive, at least 1), W
// = min(100 ms, L/2) the horizon (50 ms for a one-second Interval), and r the
// instance's own demand rate, measured on the Manager's clock at every
// refill: the permits used since the previous refill started over the time
// since (at least 1 ms). A measurement over at least W, or a higher one,
// replaces r; a lower one over a shorter span halves the gap. Before any
// measurement r is the fair share, Limit/Interval/N. Then
//
//	cap = max(1, floor(T / (2N)))
//	k   = clamp(ceil(r × W), 1, cap)          // the lease asked for: max(k, n)
//	low = min(max(floor(k/4), ceil(r × 2 × RTT)), floor(k/2))
//
// where T is Limit, or min(Limit, Burst) for a TokenBucket with a Burst, or
// min(Limit, floor(MaxQueue/step)+1) for Pacing with step =
// ceil(Interval/Limit) (a Pacing lease holds a stretch of the shared
// schedule, and the Store would queue no more than that), and RTT is the
// moving average of the Manager's Take calls. The claim that takes a lease
// from above low to low or below starts the next refill ahead; the caller
// does not wait for it. A grant that arrives while the current lease still
// has a permit is parked and moved in when the current one runs out or
// expires (what is left of it, fewer than the request needed, goes back),
// so at a steady rate no caller waits for the Store. Callers that find the
// lease empty share one refill: the first queues it, the others wait for
// the same one, each until it arrives, its own ctx ends, or the Manager's
// Timeout passes. When the Store grants fewer than asked, the Limiter
// refuses without asking again for the Store's RetryAfter, kept within
// [W/10, W].
//
// # Accuracy
//
// Leases never create permits. A permit is claimed by exactly one
// compare-and-swap, or taken back by the one swap that retires its lease,
// never both; strict requests are admitted only on a grant. So while the
// Store answers, the fleet admits at most what the Store granted:
//
//	granted = admitted + held + given back + dropped
//
// which the tests check at every step of a five-instance fleet.
// Under-admission is bounded by what is held and what was dropped: an
// instance holds at most one current lease and one parked one, so at most
// max(k, n) + max(low, n-1) permits; for requests of one permit that is
// 1.5·cap, and the fleet holds at most 1.5·N·floor(T/(2N)) <= 0.75·T.
//
// Leasing shifts admissions in time: a permit granted at g is used in [g,
// g+L] (Pacing: in [due, due+L+RTT], never before the Store's due time;
// waits are computed from the arrival of the grant). A SlidingWindow lease
// is held to the aligned interval of its grant instead (below). With H(t)
// the permits the fleet holds in leases at t (all granted within L before
// t):
//
//   - SlidingWindow: every aligned interval [k·Interval, (k+1)·Interval) of
//     Unix time admits at most Limit, exactly, on the Store's clock.
//   - TokenBucket: any span [t, t+D] admits at most Burst plus
//     D·Limit/Interval plus H(t), so at most Burst + (D+L)·Limit/Interval.
//   - Pacing: any span D admits at most (D + L + Timeout)/step + 1.
//
// Aligned leases. A SlidingWindow count lease may be used only in the
// aligned interval in which its Take was both sent and answered, read on
// the Manager's clock as Unix time (the system clock: the wall clock read
// at the answer, so that a stepped wall clock is followed; any other clock:
// internal/clock.WallOffset, a manual clock's readings being Unix ns). The
// Store decided between the two, so in that interval; its window is exact,
// so the grants it decides in any aligned interval are at most Limit. The
// lease expires at min(arrival + L, the interval's end), and a claim at a
// reading before the interval's start fails (the caller reads the clock
// again), so every admission, counted at the reading it was decided at,
// lies in the interval of its grant. A grant whose Take was sent in one
// interval and answered in the next may be either's: it is not used, and
// not given back either (a Give takes back the window's newest permits,
// which may be the new interval's grants to others, and the new interval
// would admit them again); it is dropped (ManagerStats.Dropped), and the
// callers that waited for it are not refused for it: they wait for the
// next refill, sent at once, within their ctx and the Timeout (a Store
// that ran short in that answer may have done so in the old interval).
// For the same reason a lease's leftovers go back only by a Give whose
// deadline ends before the interval does (else they are dropped), and a
// Give not answered before the end (it failed, or passed its deadline: a
// paused or slow Store decides it whenever it reads it) is charged again
// at once by a Take whose grant is spent (ManagerStats.Paid). What is
// left: that Take decided an interval later still lets the interval after
// the Give's admit the Give's permits again. The bound holds on the Store's clock as far as the
// instance's clock agrees with it: on one host exactly; across hosts an
// aligned interval admits at most the grants of a span of Interval + 2δ,
// δ the largest skew between an instance's clock and the Store's (about
// Limit·(1 + 2δ/Interval) at a steady rate, 1 % for 5 ms of skew on 1 s;
// at most 2·Limit). Any window of Interval, aligned or not, still admits
// at most Limit + H(t) (its own grants are at most Limit, the rest were
// held at t; H(t) <= 0.75·Limit by the cap). Costs: a lease ends at every
// interval's end, so at most one refill more per Interval per limiter; a
// lease asked for near the end is sized for the demand of what is left of
// the interval; what is held at the end, and a prefetch answered after
// it, is dropped and counts in the Store's window until it leaves it
// (under-admission at most what the fleet held at the end); and a budget
// whose
// Interval is not well above the Store's round trip has most refills
// straddle a boundary, its callers then waiting up to the Timeout. Token
// buckets and Pacing are not aligned: their bounds are over spans, not
// windows.
//
// A shorter Lifetime tightens these and costs more round trips (W shrinks
// with it); Strict removes them.
//
// # Strict mode
//
// A strict Limiter (Spec.Strict) has no lease: every Acquire sends one
// all-or-nothing request for its n permits, so every decision is the
// Store's, exactly. Store calls go in two lanes, at most one call in each.
// A caller that finds the lone lane free sends its request alone, in a
// Take on its own goroutine (one round trip, no hand-off). Otherwise its
// request queues on the Manager, whose store goroutine (started at once if
// it is not running) sends everything queued (strict requests and lease
// refills of every budget) in one Take, the next as soon as the one under
// way returns, and hands out the grants. So two strict callers go
// concurrently, as two callers of a per-call limiter would, and many share
// round trips. A grant whose caller stopped waiting goes back.
//
// # Failures
//
// Every Store call runs under a deadline that follows the Store's latency:
// four times the second slowest of the last 32 successful calls, at least
// max(MinTimeout, Timeout/4), at most Config.Timeout (default 250 ms), and
// Timeout before any success; a late call counts as a sample of the time
// it was given, and a successful probe's latency replaces the samples (as
// two). No caller waits longer than Timeout, whatever the Store does; a
// probe, which no caller waits for, has four Timeouts. The Manager is a breaker with two modes:
//
//	Remote ──(a failed call, or TripAfter late calls in a row)──> Fallback
//	Fallback ──(a probe's Take succeeds; OnRecover; paybacks queued)──> Remote
//
// A late call (past its deadline, or a socket timeout) that is not the
// TripAfter-th (default 3) in a row switches nothing: its requests are
// decided by the fallback policy, a local share being what is left of it
// after this instance's grants of the last Interval (none if the Store ran
// short in that time). Any other failure (a refused connection, an error
// reply) switches at once.
//
// On the way to Fallback the Manager drops every lease (a failing Store
// cannot take them back), charges each local share with this instance's
// grants of the last Interval (all of it if the Store ran short then), and
// the requests of the failed Take, and those whose wait reached the
// Timeout, are decided by the fallback policy, never left waiting. In
// Fallback every Acquire is decided at once by its budget's policy without
// touching the Store: FallbackLocal (the default) enforces a local share,
// Spec.LocalLimit or Limit/N, with a limiter of the budget's algorithm (see
// localLimiter), N being Manager.Share (the held live count, or the
// expected fleet size before it was counted); FallbackPass admits,
// FallbackBlock refuses. The first decision in Fallback at least
// ProbeInterval after the last probe (or the failure) queues a probe, a
// Take of one permit of a dedicated budget (Config.ProbeKey), without
// waiting for it, once it is decided itself (so the probe's payback counts
// it). On its success the Manager calls OnRecover (the engine
// beats), queues for each local share a partial Take of its admissions in
// the last Interval times N, at most the budget (a payback, whose grant is
// spent), and returns to Remote; the paybacks go in the next Take, ahead of
// any refill. Either lane's failure switches the mode; a failure of a call
// that started before the last change of mode changes nothing (it was
// counted already, or it is older than a probe that succeeded since).
// Transitions go to Config.OnTransition in the order the mode changed, one
// at a time, outside locks, on the goroutine that made the Store call (the
// store goroutine or a lone strict caller) or on one already telling an
// earlier transition; Manager.Mode reads the mode.
//
// # Live count
//
// A Heartbeat keeps the live count as the largest the Store answered
// within two TTLs, the hold restarting at the first beat that succeeds
// after failures: a Store that restarted empty counts only the members
// that have beaten since, and the count never drops on its word alone.
// Until the fleet was counted (before the first successful beat, and for
// the hold after it when beats failed before it), local shares divide by
// HeartbeatConfig.Expected (DefaultExpected, 10).
//
// # Goroutines
//
// The Manager's store goroutine runs only while there is work and Close
// waits for it, as for a lone strict caller's Take. A Heartbeat's goroutine runs until its Close. With a clock
// other than core.SystemClock (tests), each Store call also has a goroutine
// that ends it at its deadline on that clock, and the call waits for it.
package lease
