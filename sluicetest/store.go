package sluicetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
	sysclock "github.com/sluice-go/sluice/internal/clock"
)

// NewStore returns a cluster.Store in memory that decides on clock (nil:
// clock.System()), for tests of code that shares limits through
// sluice.WithCluster. Each algorithm counts as the Redis store's scripts do
// (module github.com/sluice-go/sluice/cluster/redis): a token bucket starts
// full and refills continuously up to Burst; a sliding window admits at
// most Limit permits in any Interval; pacing spaces permits Interval/Limit
// apart and grants a wait of at most MaxQueue; Give returns permits as the
// cluster.Store contract says; members expire after their ttl. The
// difference is the clock: times are the clock's nanoseconds, where Redis
// counts in microseconds.
//
// fail makes the store fail: from a call fail(err) with a non-nil err,
// every method returns err, as a store that cannot be reached, until
// fail(nil). Budgets and members are kept meanwhile.
func NewStore(clock sluice.Clock) (store cluster.Store, fail func(err error)) {
	if clock == nil {
		clock = sysclock.System()
	}
	s := &memStore{clock: clock, budgets: map[string]*budget{}, apps: map[string]map[string]memMember{}}
	return s, s.setFail
}

// memStore is NewStore's cluster.Store.
type memStore struct {
	clock sluice.Clock

	mu      sync.Mutex
	err     error
	budgets map[string]*budget              // by algorithm and key
	apps    map[string]map[string]memMember // app -> member id
}

// budget is one budget's state, as the Redis keys hold it. Times are the
// clock's nanoseconds, held in float64 as the scripts hold microseconds in
// Lua numbers.
type budget struct {
	// Token bucket: the level tokens at time ts; the state is gone (the
	// bucket full) from expires on.
	tokens, ts, expires float64
	// Sliding window: the grants still in the window, oldest first, and
	// the permits they hold.
	log  []grant
	used float64
	// Pacing: the theoretical arrival time of the next permit.
	tat float64
}

type grant struct {
	at float64
	n  float64
}

type memMember struct {
	m       cluster.Member
	expires int64
}

func (s *memStore) setFail(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}

// begin checks ctx and the failure, and takes the lock.
func (s *memStore) begin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return err
	}
	return nil
}

// Take decides every request at one instant of the store's clock, in order.
func (s *memStore) Take(ctx context.Context, reqs []cluster.Request, grants []cluster.Grant) error {
	if len(grants) != len(reqs) {
		return fmt.Errorf("sluicetest: %d grants for %d requests", len(grants), len(reqs))
	}
	for i := range reqs {
		if err := checkBudget(&reqs[i].Budget); err != nil {
			return err
		}
		if reqs[i].N < 1 || reqs[i].N > maxN {
			return fmt.Errorf("sluicetest: budget %q: N %d out of [1, 2^53]", reqs[i].Budget.Key, reqs[i].N)
		}
	}
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	now := float64(s.clock.Nanotime())
	for i := range reqs {
		r := &reqs[i]
		b := &r.Budget
		st := s.budgets[stateKey(b)]
		if st == nil {
			st = &budget{}
			s.budgets[stateKey(b)] = st
		}
		var g, wait, retry float64
		switch b.Algorithm {
		case cluster.TokenBucket:
			g, retry = st.takeBucket(now, float64(r.N), r.Partial, b)
		case cluster.SlidingWindow:
			g, retry = st.takeWindow(now, float64(r.N), r.Partial, b)
		case cluster.Calendar:
			g = st.takeCount(now, float64(r.N), r.Partial, b)
		default:
			g, wait, retry = st.takePacing(now, float64(r.N), b)
		}
		grants[i] = cluster.Grant{N: int64(g), Wait: ceilNanos(wait), RetryAfter: ceilNanos(retry)}
	}
	return nil
}

// Give returns n permits to b, as the Redis store's give script does.
func (s *memStore) Give(ctx context.Context, b cluster.Budget, n int64) error {
	if n < 1 {
		return nil
	}
	if err := checkBudget(&b); err != nil {
		return err
	}
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	st := s.budgets[stateKey(&b)]
	if st == nil {
		return nil // a full bucket, an empty window, nothing scheduled
	}
	now := float64(s.clock.Nanotime())
	switch b.Algorithm {
	case cluster.TokenBucket:
		st.giveBucket(now, float64(min(n, maxN)), &b)
	case cluster.SlidingWindow:
		st.giveWindow(now, float64(min(n, maxN)), &b)
	case cluster.Calendar:
		if now < st.expires {
			st.used = max(st.used-float64(n), 0)
		}
	default:
		if T := float64(b.Interval) / b.Limit; st.tat > now {
			st.tat = max(st.tat-float64(n)*T, now) // the n latest permits, never into the past
		}
	}
	return nil
}

// takeCount decides a Calendar budget: at most Limit permits in the key,
// which expires Interval after its first grant, as the Redis store's.
func (st *budget) takeCount(now, n float64, partial bool, b *cluster.Budget) (g float64) {
	if st.expires == 0 || now >= st.expires {
		st.used, st.expires = 0, 0
	}
	if avail := b.Limit - st.used; n <= avail {
		g = n
	} else if partial && avail >= 1 {
		g = math.Floor(avail)
	}
	if g > 0 && st.expires == 0 {
		st.expires = now + float64(b.Interval)
	}
	st.used += g
	return g
}

func (st *budget) takeBucket(now, n float64, partial bool, b *cluster.Budget) (g, retry float64) {
	burst, rate := bucketTerms(b)
	tokens := st.level(now, rate, burst)
	if tokens >= n {
		g = n
	} else if partial && tokens >= 1 {
		g = math.Floor(tokens)
	}
	tokens -= g
	st.storeBucket(now, tokens, rate, burst, b)
	if rest := n - g; rest > 0 && rest <= burst {
		retry = (rest - tokens) / rate
	}
	return g, retry
}

func (st *budget) giveBucket(now, n float64, b *cluster.Budget) {
	burst, rate := bucketTerms(b)
	if st.expires == 0 || now >= st.expires {
		return // already full
	}
	st.storeBucket(now, min(st.level(now, rate, burst)+n, burst), rate, burst, b)
}

func bucketTerms(b *cluster.Budget) (burst, rate float64) {
	burst = b.Burst
	if burst <= 0 {
		burst = b.Limit
	}
	return burst, b.Limit / float64(b.Interval)
}

// level is the bucket's level at now: the stored level plus the refill since
// it was stored, at most burst; a bucket without state is full.
func (st *budget) level(now, rate, burst float64) float64 {
	if st.expires == 0 || now >= st.expires {
		return burst
	}
	t := st.tokens
	if now > st.ts {
		t += (now - st.ts) * rate
	}
	return min(t, burst)
}

// storeBucket keeps the level until the bucket would be full again, plus an
// interval (the Redis key's expiry, in whole milliseconds).
func (st *budget) storeBucket(now, tokens, rate, burst float64, b *cluster.Budget) {
	st.tokens, st.ts = tokens, now
	st.expires = now + ceilMillis((burst-tokens)/rate+float64(b.Interval))
}

// load drops the grants that left the window (at or before now - ivl).
func (st *budget) load(now float64, b *cluster.Budget) {
	edge := now - float64(b.Interval)
	k := 0
	for k < len(st.log) && st.log[k].at <= edge {
		st.used -= st.log[k].n
		k++
	}
	st.log = slices.Delete(st.log, 0, k)
	if st.used < 0 || len(st.log) == 0 {
		st.used = 0
	}
}

func (st *budget) takeWindow(now, n float64, partial bool, b *cluster.Budget) (g, retry float64) {
	st.load(now, b)
	limit := b.Limit
	avail := limit - st.used
	if n <= avail {
		g = n
	} else if partial && avail >= 1 {
		g = math.Floor(avail)
	}
	if g > 0 {
		// The grants of one instant are one entry, as one call's are in the
		// Redis log.
		if last := len(st.log) - 1; last >= 0 && st.log[last].at == now {
			st.log[last].n += g
		} else {
			st.log = append(st.log, grant{at: now, n: g})
		}
		st.used += g
	}
	if rest := n - g; rest > 0 && rest <= limit {
		// The rest fits once need permits have left the window; the walk
		// stops at the 128th grant, as the script's does.
		need := rest - (limit - st.used)
		freed := 0.0
		for i, e := range st.log {
			if i == 128 {
				break
			}
			freed += e.n
			retry = e.at + float64(b.Interval) - now
			if freed >= need {
				break
			}
		}
	}
	return g, retry
}

// giveWindow forgets the n most recent permits still in the window.
func (st *budget) giveWindow(now, n float64, b *cluster.Budget) {
	st.load(now, b)
	for n > 0 && len(st.log) > 0 {
		e := &st.log[len(st.log)-1]
		if e.n <= n {
			n -= e.n
			st.used -= e.n
			st.log = st.log[:len(st.log)-1]
			continue
		}
		e.n -= n
		st.used -= n
		n = 0
	}
	st.used = max(st.used, 0)
}

func (st *budget) takePacing(now, n float64, b *cluster.Budget) (g, wait, retry float64) {
	T := float64(b.Interval) / b.Limit
	tat := max(st.tat, now)
	wait = tat - now
	if maxq := float64(b.MaxQueue); wait > maxq {
		return 0, 0, wait - maxq
	}
	st.tat = tat + n*T
	return n, wait, 0
}

// Beat records m for ttl (rounded up to the millisecond, as Redis keeps it)
// and returns the number of live members of m.App.
func (s *memStore) Beat(ctx context.Context, m cluster.Member, ttl time.Duration) (int, error) {
	switch {
	case m.App == "":
		return 0, errors.New("sluicetest: beat: empty app")
	case m.ID == "":
		return 0, errors.New("sluicetest: beat: empty member id")
	case ttl <= 0:
		return 0, fmt.Errorf("sluicetest: beat: ttl %v not positive", ttl)
	}
	if err := s.begin(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	if !m.Started.IsZero() {
		m.Started = time.Unix(0, m.Started.UnixNano()) // as it comes back from Redis
	}
	now := s.clock.Nanotime()
	ttl = (ttl + time.Millisecond - 1) / time.Millisecond * time.Millisecond
	ms := s.apps[m.App]
	if ms == nil {
		ms = map[string]memMember{}
		s.apps[m.App] = ms
	}
	ms[m.ID] = memMember{m: m, expires: now + int64(ttl)}
	return len(s.live(m.App, now)), nil
}

// Members returns the live members of app, by ID.
func (s *memStore) Members(ctx context.Context, app string) ([]cluster.Member, error) {
	if app == "" {
		return nil, errors.New("sluicetest: members: empty app")
	}
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	return s.live(app, s.clock.Nanotime()), nil
}

// live drops app's expired members and returns the others, by ID.
func (s *memStore) live(app string, now int64) []cluster.Member {
	out := []cluster.Member{}
	for id, m := range s.apps[app] {
		if m.expires <= now {
			delete(s.apps[app], id)
			continue
		}
		out = append(out, m.m)
	}
	slices.SortFunc(out, func(a, b cluster.Member) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// maxN is the most permits a request may carry: the Redis scripts count in
// doubles, exact to 2^53.
const maxN = 1 << 53

// checkBudget refuses the budgets the Redis store refuses.
func checkBudget(b *cluster.Budget) error {
	switch {
	case b.Key == "":
		return errors.New("sluicetest: empty budget key")
	case b.Algorithm < cluster.TokenBucket || b.Algorithm > cluster.Calendar:
		return fmt.Errorf("sluicetest: budget %q: unknown algorithm %d", b.Key, b.Algorithm)
	case !(b.Limit > 0) || math.IsInf(b.Limit, 0):
		return fmt.Errorf("sluicetest: budget %q: limit %v not positive and finite", b.Key, b.Limit)
	case b.Interval < time.Microsecond:
		return fmt.Errorf("sluicetest: budget %q: interval %v below 1µs", b.Key, b.Interval)
	case !(b.Burst >= 0) || math.IsInf(b.Burst, 0):
		return fmt.Errorf("sluicetest: budget %q: burst %v negative or not finite", b.Key, b.Burst)
	case b.MaxQueue < 0:
		return fmt.Errorf("sluicetest: budget %q: negative max queue %v", b.Key, b.MaxQueue)
	}
	return nil
}

// stateKey keeps the algorithms' states apart, as the Redis keys do.
func stateKey(b *cluster.Budget) string { return b.Algorithm.String() + "\x00" + b.Key }

// ceilNanos turns a span in (fractional) nanoseconds into a Duration,
// rounded up so that a wait is never shorter than the store's.
func ceilNanos(ns float64) time.Duration {
	switch ns = math.Ceil(ns); {
	case ns <= 0:
		return 0
	case ns >= math.MaxInt64:
		return math.MaxInt64
	}
	return time.Duration(ns)
}

// ceilMillis rounds a span in nanoseconds up to whole milliseconds, at least
// one (a PEXPIRE argument).
func ceilMillis(ns float64) float64 {
	return max(math.Ceil(ns/1e6), 1) * 1e6
}
