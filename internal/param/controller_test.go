package param

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/ruledef"
	"github.com/sluice-go/sluice/internal/sluicetest"
	"github.com/sluice-go/sluice/rules"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const start = int64(1_000_000_000_000)

func newCtl(t *testing.T, r rules.Param) *Controller {
	t.Helper()
	if r.Resource == "" {
		r.Resource = "res"
	}
	c, err := NewController(r)
	require.NoError(t, err)
	return c
}

// check runs one entry of value v at now with batch n; it returns the block
// error and the entry context (holding the tickets of a pass).
func check(c *Controller, clk core.Clock, now int64, n int64, args ...any) (*core.BlockError, *entry.Context) {
	ec := &entry.Context{Resource: "res", Batch: n, Start: now}
	return c.Check(context.Background(), ec, entry.Args{Positional: args}, clk), ec
}

// admit counts how many single entries of v pass in a row at now (stopping at
// the first refusal, at most limit).
func admit(c *Controller, now int64, v any, limit int) int {
	for i := 0; i < limit; i++ {
		if be, _ := check(c, nil, now, 1, v); be != nil {
			return i
		}
	}
	return limit
}

func TestUsersLimitedIndependently(t *testing.T) {
	c := newCtl(t, rules.Param{Threshold: 3, Exceptions: map[string]int64{"vip-1": 5, "banned": 0}})
	tests := []struct {
		give string
		want int
	}{
		{"alice", 3},
		{"bob", 3},
		{"vip-1", 5},
		{"banned", 0},
		{"alice", 0}, // alice spent her tokens above; bob's did not count
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, admit(c, start, tt.give, 100), "admitted(%q)", tt.give)
	}
	be, _ := check(c, nil, start, 1, "banned")
	require.NotNil(t, be)
	assert.Equal(t, "value refused by its exception", be.Reason)
	be, _ = check(c, nil, start, 1, "alice")
	require.NotNil(t, be)
	assert.Equal(t, core.BlockParam, be.Type)
	assert.True(t, errors.Is(be, core.ErrBlocked))
	assert.Equal(t, 3.0, be.Observed)
	assert.Equal(t, 3.0, be.Threshold)
	assert.Equal(t, 334*time.Millisecond, be.RetryAfter) // 333,333,333.33 ns, rounded up to the millisecond
}

func TestDurationsExact(t *testing.T) {
	const day = 24 * time.Hour
	tests := []struct {
		name      string
		threshold int64
		burst     int64
		window    time.Duration
	}{
		{"per second", 10, 0, time.Second},
		{"per second, 1/3 ns remainders", 3, 0, time.Second},
		{"per minute", 5, 0, time.Minute},
		{"per minute with burst", 5, 2, time.Minute},
		{"per hour", 100, 0, time.Hour},
		{"per hour with burst", 100, 50, time.Hour},
		{"per day", 1000, 0, day},
		{"per day, 7 (non-dividing)", 7, 3, day},
		{"per day, huge", 1_000_000_000_000, 0, day},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCtl(t, rules.Param{Threshold: tt.threshold, Burst: tt.burst, Duration: tt.window})
			size := tt.threshold + tt.burst
			now := start
			// A new value starts full: exactly threshold+burst at once.
			if size <= 1000 {
				require.Equal(t, int(size), admit(c, now, "u", 1000))
			} else {
				be, _ := check(c, nil, now, size, "u")
				require.Nil(t, be)
				be, _ = check(c, nil, now, 1, "u")
				require.NotNil(t, be)
			}
			// One token comes back after ceil(window/threshold).
			per := (int64(tt.window) + tt.threshold - 1) / tt.threshold
			be, _ := check(c, nil, now, 1, "u")
			require.NotNil(t, be)
			require.Equal(t, entry.RetryMs(time.Duration(per)), be.RetryAfter, "the exact wait, rounded up to the millisecond")
			tok, ok := c.Tokens("u", now+per-1)
			require.True(t, ok)
			require.Equal(t, int64(0), tok, "one ns early")
			tok, _ = c.Tokens("u", now+per)
			require.Equal(t, int64(1), tok)
			// Exactly threshold per window, however window/threshold rounds:
			// one ns before the window ends there is one token fewer.
			tok, _ = c.Tokens("u", now+int64(tt.window)-1)
			require.Equal(t, tt.threshold-1, tok)
			now += int64(tt.window)
			tok, _ = c.Tokens("u", now)
			require.Equal(t, tt.threshold, tok)
			if tt.threshold <= 1000 {
				require.Equal(t, int(tt.threshold), admit(c, now, "u", 1000), "admitted in the second window")
			}
			// A long quiet spell refills to threshold+burst, no more.
			now += 10 * int64(tt.window)
			tok, _ = c.Tokens("u", now)
			require.Equal(t, size, tok)
		})
	}
}

func TestBatchAndGiveBack(t *testing.T) {
	c := newCtl(t, rules.Param{Threshold: 4})
	be, _ := check(c, nil, start, 5, "u")
	require.NotNil(t, be, "batch larger than the bucket")
	assert.Equal(t, time.Duration(0), be.RetryAfter, "never fits: no retry hint")
	be, ec := check(c, nil, start, 3, "u")
	require.Nil(t, be)
	require.Equal(t, 1, ec.Tickets())
	tok, _ := c.Tokens("u", start)
	require.Equal(t, int64(1), tok)
	// A later check refused the entry: its tokens come back.
	ec.ReleaseTickets(entry.ExitInfo{Start: start, End: start, Batch: 3, Blocked: true})
	tok, _ = c.Tokens("u", start)
	require.Equal(t, int64(4), tok)
	// A normal exit gives nothing back.
	_, ec = check(c, nil, start, 2, "u")
	ec.ReleaseTickets(entry.ExitInfo{Start: start, End: start + 5, Batch: 2})
	tok, _ = c.Tokens("u", start+5)
	require.Equal(t, int64(2), tok)
}

func TestArgumentSelection(t *testing.T) {
	named := func(key string, v any) *entry.Arg {
		return &entry.Arg{Key: key, Named: true, Value: entry.Value{Any: v, Kind: entry.KindAny}}
	}
	str := func(i int, s string) *entry.Arg {
		return &entry.Arg{Index: i, Value: entry.Value{Str: s, Kind: entry.KindString}}
	}
	tests := []struct {
		name string
		rule rules.Param
		args entry.Args
		want string // the value counted; "" for none
	}{
		{"first positional", rules.Param{}, entry.Args{Positional: []any{"a", "b"}}, "a"},
		{"second positional", rules.Param{Index: 1}, entry.Args{Positional: []any{"a", "b"}}, "b"},
		{"index out of range", rules.Param{Index: 2}, entry.Args{Positional: []any{"a", "b"}}, ""},
		{"nil value", rules.Param{}, entry.Args{Positional: []any{nil}}, ""},
		{"no args", rules.Param{}, entry.Args{}, ""},
		{"attachment", rules.Param{Key: "ip"}, entry.Args{Positional: []any{"a"}, Given: []*entry.Arg{named("ip", "10.0.0.1")}}, "10.0.0.1"},
		{"last attachment wins", rules.Param{Key: "ip"}, entry.Args{Given: []*entry.Arg{named("ip", "x"), named("ip", "y")}}, "y"},
		{"missing attachment", rules.Param{Key: "ip"}, entry.Args{Positional: []any{"a"}}, ""},
		{"nil attachment", rules.Param{Key: "ip"}, entry.Args{Given: []*entry.Arg{named("ip", nil)}}, ""},
		{"int is its decimal form", rules.Param{}, entry.Args{Positional: []any{uint16(42)}}, "42"},
		{"typed string", rules.Param{Index: 3}, entry.Args{Given: []*entry.Arg{str(3, "t")}}, "t"},
		{"typed before WithArgs", rules.Param{Index: 1}, entry.Args{Positional: []any{"a", "b"}, Given: []*entry.Arg{str(1, "t")}}, "t"},
		{"typed int", rules.Param{}, entry.Args{Given: []*entry.Arg{{Value: entry.Value{Int: -7, Kind: entry.KindInt}}}}, "-7"},
		{"typed attachment", rules.Param{Key: "ip"}, entry.Args{Given: []*entry.Arg{{Key: "ip", Named: true, Value: entry.Value{Str: "10.0.0.2", Kind: entry.KindString}}}}, "10.0.0.2"},
		{"typed positional is no attachment", rules.Param{Key: "ip"}, entry.Args{Given: []*entry.Arg{str(0, "x")}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.rule.Threshold = 1
			c := newCtl(t, tt.rule)
			ec := &entry.Context{Resource: "res", Batch: 1, Start: start}
			require.Nil(t, c.Check(context.Background(), ec, tt.args, nil))
			if tt.want == "" {
				assert.Equal(t, 0, c.Tracked())
				assert.Equal(t, 0, ec.Tickets())
				return
			}
			assert.Equal(t, 1, c.Tracked())
			tok, ok := c.Tokens(tt.want, start)
			require.True(t, ok, "value %q tracked", tt.want)
			assert.Equal(t, int64(0), tok)
		})
	}
}

func TestIntAndStringFormsShareState(t *testing.T) {
	c := newCtl(t, rules.Param{Threshold: 3, Exceptions: map[string]int64{"7": 1}})
	for _, v := range []any{42, int64(42), "42"} {
		be, _ := check(c, nil, start, 1, v)
		require.Nil(t, be, "%T", v)
	}
	be, _ := check(c, nil, start, 1, uint8(42))
	require.NotNil(t, be)
	assert.Equal(t, 1, admit(c, start, int32(7), 10), "exception applies to the integer 7")
}

func TestThrottle(t *testing.T) {
	clk := sluicetest.NewManualClock(start)
	c := newCtl(t, rules.Param{Threshold: 10, Throttle: &rules.Throttle{MaxQueueing: 250 * time.Millisecond}})
	now := clk.Nanotime()
	be, _ := check(c, clk, now, 1, "a")
	require.Nil(t, be, "first request passes at once")
	be, _ = check(c, clk, now, 1, "b")
	require.Nil(t, be, "another value has its own schedule")

	var wg sync.WaitGroup
	results := make([]*core.BlockError, 2)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], _ = check(c, clk, now, 1, "a")
		}()
		// Let each waiter take its turn in order: 100 ms, then 200 ms.
		require.NoError(t, clk.BlockUntil(context.Background(), i+1))
	}
	// The fourth would wait 300 ms > 250 ms: refused at once.
	be, _ = check(c, clk, now, 1, "a")
	require.NotNil(t, be)
	assert.Equal(t, "wait exceeds max queueing", be.Reason)
	assert.Equal(t, 300.0, be.Observed)
	assert.Equal(t, 250.0, be.Threshold)
	assert.Equal(t, 50*time.Millisecond, be.RetryAfter)
	clk.Advance(200 * time.Millisecond)
	wg.Wait()
	assert.Equal(t, []*core.BlockError{nil, nil}, results)

	// A cancelled wait gives its turn back.
	now = clk.Nanotime() // 200 ms: "a" is scheduled up to 200 ms
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *core.BlockError)
	go func() {
		ec := &entry.Context{Resource: "res", Batch: 1, Start: now}
		done <- c.Check(ctx, ec, entry.Args{Positional: []any{"a"}}, clk)
	}()
	require.NoError(t, clk.BlockUntil(context.Background(), 1))
	cancel()
	be = <-done
	require.NotNil(t, be)
	assert.Contains(t, be.Reason, "wait cancelled")
	go func() { b, _ := check(c, clk, now, 1, "a"); done <- b }()
	require.NoError(t, clk.BlockUntil(context.Background(), 1))
	clk.Advance(100 * time.Millisecond) // the same 100 ms slot is offered again
	assert.Nil(t, <-done)
}

func TestThrottleExactPacing(t *testing.T) {
	// 3 per day, no queueing: one each 8 h, to the nanosecond.
	c := newCtl(t, rules.Param{Threshold: 3, Duration: 24 * time.Hour, Throttle: &rules.Throttle{}})
	now := start
	be, _ := check(c, nil, now, 1, "u")
	require.Nil(t, be)
	be, _ = check(c, nil, now+int64(8*time.Hour)-1, 1, "u")
	require.NotNil(t, be)
	assert.Equal(t, time.Duration(1), be.RetryAfter)
	be, _ = check(c, nil, now+int64(8*time.Hour), 1, "u")
	require.Nil(t, be)
}

func TestConcurrencyPerValue(t *testing.T) {
	const (
		threshold = 3
		workers   = 64
		rounds    = 300
	)
	c := newCtl(t, rules.Param{Metric: rules.Concurrency, Threshold: threshold, Capacity: 64})
	values := []string{"a", "b", "c", "d"}
	var inside [4]atomic.Int64
	var maxSeen [4]atomic.Int64
	var passed atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				k := (w + i) % len(values)
				be, ec := check(c, nil, start, 1, values[k])
				if be != nil {
					continue
				}
				passed.Add(1)
				n := inside[k].Add(1)
				for {
					m := maxSeen[k].Load()
					if n <= m || maxSeen[k].CompareAndSwap(m, n) {
						break
					}
				}
				inside[k].Add(-1)
				ec.ReleaseTickets(entry.ExitInfo{Start: start, End: start, Batch: 1})
			}
		}()
	}
	wg.Wait()
	require.Positive(t, passed.Load())
	for k, v := range values {
		assert.LessOrEqual(t, maxSeen[k].Load(), int64(threshold), "max in flight of %q", v)
		assert.Equal(t, int64(0), c.InFlight(v), "in flight of %q after all exits", v)
	}
}

func TestConcurrencyValueInFlightIsNotEvicted(t *testing.T) {
	c := newCtl(t, rules.Param{Metric: rules.Concurrency, Threshold: 1, Capacity: 64})
	be, held := check(c, nil, start, 1, "held")
	require.Nil(t, be)
	for i := 0; i < 10_000; i++ {
		_, ec := check(c, nil, start, 1, i)
		ec.ReleaseTickets(entry.ExitInfo{Batch: 1})
		require.LessOrEqual(t, c.Tracked(), 64+1)
	}
	assert.Equal(t, int64(1), c.InFlight("held"), "still tracked and counted")
	be, _ = check(c, nil, start, 1, "held")
	require.NotNil(t, be, "the in-flight request still counts")
	held.ReleaseTickets(entry.ExitInfo{Batch: 1})
	assert.Equal(t, int64(0), c.InFlight("held"))
	for i := 0; i < 1000; i++ {
		_, ec := check(c, nil, start, 1, -i-1)
		ec.ReleaseTickets(entry.ExitInfo{Batch: 1})
	}
	assert.Equal(t, 64, c.Tracked(), "back within capacity once released")
}

func TestBuild(t *testing.T) {
	base := rules.Param{Resource: "r", Threshold: 5, Duration: time.Minute}
	old, err := Build([]rules.Param{base}, nil, nil)
	require.NoError(t, err)
	require.Equal(t, 2, admit(old["r"][0], start, "u", 2))

	t.Run("invalid rule refused whole", func(t *testing.T) {
		_, err := Build([]rules.Param{base, {Resource: "r", Threshold: 0}}, old, nil)
		var re *rules.Error
		require.ErrorAs(t, err, &re)
		assert.Equal(t, 1, re.Index)
		assert.Equal(t, "Threshold", re.Field)
	})
	tests := []struct {
		name string
		give rules.Param
		want int64 // tokens of "u" under the new rule; -1: not tracked
	}{
		{"identical", base, 3},
		{"new threshold and exceptions keep state", rules.Param{Resource: "r", Threshold: 4, Duration: time.Minute, Exceptions: map[string]int64{"x": 1}}, 3},
		{"lower threshold clamps", rules.Param{Resource: "r", Threshold: 2, Duration: time.Minute}, 2},
		{"other duration starts afresh", rules.Param{Resource: "r", Threshold: 5, Duration: time.Hour}, -1},
		{"other argument starts afresh", rules.Param{Resource: "r", Threshold: 5, Duration: time.Minute, Index: 1}, -1},
		{"other capacity starts afresh", rules.Param{Resource: "r", Threshold: 5, Duration: time.Minute, Capacity: 5}, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Build([]rules.Param{tt.give}, old, nil)
			require.NoError(t, err)
			c := got["r"][0]
			tok, ok := c.Tokens("u", start)
			if tt.want < 0 {
				assert.False(t, ok)
				return
			}
			require.True(t, ok)
			assert.Equal(t, tt.want, tok)
		})
	}
}

func TestBlockedRuleIsTheControllersRule(t *testing.T) {
	c := newCtl(t, rules.Param{ID: "per-user", Threshold: 1})
	admit(c, start, "u", 1)
	be, _ := check(c, nil, start, 1, "u")
	require.NotNil(t, be)
	assert.Equal(t, core.RuleRef{ID: "per-user", Metric: "qps"}, be.Rule)
	assert.Contains(t, be.Error(), "blocked by param rule")
}

func TestWaitSaturates(t *testing.T) {
	c := newCtl(t, rules.Param{Threshold: 1, Duration: ruledef.MaxParamDuration})
	assert.Equal(t, int64(ruledef.MaxParamDuration), c.wait(1, 0, 1))
	assert.Equal(t, int64(math.MaxInt64), c.wait(math.MaxInt64, 0, 1))
	assert.Equal(t, int64(ruledef.MaxParamDuration)-5, c.wait(1, 5, 1))
}

func ExampleController() {
	c, _ := NewController(rules.Param{Resource: "GET /feed", Threshold: 2, Duration: time.Minute})
	for _, user := range []string{"alice", "alice", "alice", "bob"} {
		ec := &entry.Context{Resource: "GET /feed", Batch: 1, Start: 0}
		if be := c.Check(context.Background(), ec, entry.Args{Positional: []any{user}}, nil); be != nil {
			fmt.Println(user, "refused, retry after", be.RetryAfter)
			continue
		}
		fmt.Println(user, "admitted")
	}
	// Output:
	// alice admitted
	// alice admitted
	// alice refused, retry after 30s
	// bob admitted
}

// waitClock is a clock on which every wait ends at once; it records the
// waits asked of it, so a test sees how long an entry would have queued.
type waitClock struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (c *waitClock) Nanotime() int64 { return 0 }

func (c *waitClock) NewTimer(d time.Duration) core.Timer {
	c.mu.Lock()
	c.waits = append(c.waits, d)
	c.mu.Unlock()
	ch := make(chan time.Time, 1)
	ch <- time.Time{}
	return firedTimer(ch)
}

// take returns the waits recorded since the last call.
func (c *waitClock) take() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.waits
	c.waits = nil
	return w
}

type firedTimer chan time.Time

func (t firedTimer) C() <-chan time.Time { return t }
func (t firedTimer) Stop() bool          { return false }

// TestThrottleBatchOccupiesItsSlots: a batch of n passes at its first slot
// and holds the schedule for n slots, on an idle schedule as on a busy one;
// an entry never passes before its exact slot; a batch larger than the
// threshold never passes, says why and takes no slot.
func TestThrottleBatchOccupiesItsSlots(t *testing.T) {
	const ms = int64(time.Millisecond)
	type step struct {
		at        int64 // offset from start, ns
		batch     int64
		wantWait  time.Duration // -1: refused
		wantRetry time.Duration // of a refusal
	}
	const refused = -1
	throttle := func(threshold int64, queue time.Duration) rules.Param {
		return rules.Param{Threshold: threshold, Throttle: &rules.Throttle{MaxQueueing: queue}}
	}
	tests := []struct {
		name  string
		rule  rules.Param
		steps []step
	}{
		{"idle batch holds n slots", throttle(10, 0), []step{
			{0, 5, 0, 0},
			{500*ms - 1, 1, refused, 1},
			{500 * ms, 1, 0, 0},
			{600*ms - 1, 1, refused, 1},
		}},
		{"idle batch of the threshold holds the window", throttle(10, 0), []step{
			{0, 10, 0, 0},
			{1000*ms - 1, 1, refused, 1},
			{1000 * ms, 10, 0, 0},
		}},
		{"busy schedule: a batch waits for its first slot only", throttle(10, time.Second), []step{
			{0, 1, 0, 0},
			{0, 3, 100 * time.Millisecond, 0},
			{0, 1, 400 * time.Millisecond, 0},
			{0, 6, 500 * time.Millisecond, 0},
			{99 * ms, 1, refused, time.Millisecond}, // would wait 1001 ms
			{100 * ms, 1, time.Second, 0},
		}},
		{"fractions round up: never before the exact slot", throttle(3, 0), []step{
			{0, 2, 0, 0}, // holds [0, 666,666,666.67)
			{666_666_666, 1, refused, 1},
			{666_666_667, 1, 0, 0}, // holds up to 1,000,000,000.33
			{1_000_000_000, 1, refused, 1},
			{1_000_000_001, 1, 0, 0},
		}},
		{"batch larger than the threshold", throttle(10, time.Hour), []step{
			{0, 11, refused, 0},
			{0, 10, 0, 0}, // the refusal took no slot
		}},
		{"batch larger than the value's exception", rules.Param{Threshold: 10, Throttle: &rules.Throttle{}, Exceptions: map[string]int64{"u": 2}}, []step{
			{0, 3, refused, 0},
			{0, 2, 0, 0},
			{1000*ms - 1, 1, refused, 1},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCtl(t, tt.rule)
			clk := &waitClock{}
			for i, s := range tt.steps {
				be, _ := check(c, clk, start+s.at, s.batch, "u")
				waits := clk.take()
				if s.wantWait != refused {
					require.Nil(t, be, "step %d", i)
					if s.wantWait == 0 {
						assert.Empty(t, waits, "step %d: no wait", i)
					} else {
						assert.Equal(t, []time.Duration{s.wantWait}, waits, "step %d: wait", i)
					}
					continue
				}
				require.NotNil(t, be, "step %d", i)
				assert.Empty(t, waits, "step %d: refused at once", i)
				assert.Equal(t, s.wantRetry, be.RetryAfter, "step %d: RetryAfter", i)
				if limit := (&paramModel{rule: tt.rule}).threshold("u"); s.batch > limit {
					assert.Equal(t, "batch larger than threshold", be.Reason, "step %d", i)
					assert.Equal(t, float64(s.batch), be.Observed, "step %d", i)
					assert.Equal(t, float64(limit), be.Threshold, "step %d", i)
				}
			}
		})
	}
}

// TestThrottleAdmittedSlotsNeverOverlap drives one value from many
// goroutines with batches of 1 to 3 (and some oversized ones) at start
// instants drawn out of order, with no queueing: whatever the interleaving,
// the admitted entries' slots (start to start + batch × 100 ms) never
// overlap, and each refusal's RetryAfter is the exact time to the end of
// the schedule at the moment it was refused.
func TestThrottleAdmittedSlotsNeverOverlap(t *testing.T) {
	const (
		workers = 16
		each    = 300
		step    = int64(100 * time.Millisecond)
	)
	c := newCtl(t, rules.Param{Threshold: 10, Throttle: &rules.Throttle{}})
	type pass struct{ at, batch int64 }
	var (
		mu     sync.Mutex
		passed []pass
	)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(w), 7))
			for i := 0; i < each; i++ {
				at := start + rnd.Int64N(60_000)*int64(time.Millisecond) // on 1 ms boundaries
				n := 1 + rnd.Int64N(3)
				if rnd.IntN(50) == 0 {
					n = 11
				}
				be, _ := check(c, nil, at, n, "u")
				if be != nil {
					if n > 10 {
						assert.Equal(t, "batch larger than threshold", be.Reason)
						assert.Zero(t, be.RetryAfter)
					} else {
						assert.Positive(t, be.RetryAfter)
					}
					continue
				}
				require.LessOrEqual(t, n, int64(10))
				mu.Lock()
				passed = append(passed, pass{at, n})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.NotEmpty(t, passed)
	slices.SortFunc(passed, func(a, b pass) int { return cmp.Compare(a.at, b.at) })
	for i := 1; i < len(passed); i++ {
		prev := passed[i-1]
		require.GreaterOrEqual(t, passed[i].at, prev.at+prev.batch*step,
			"entry at %v (batch %d) inside the slots of the one at %v (batch %d)",
			time.Duration(passed[i].at-start), passed[i].batch, time.Duration(prev.at-start), prev.batch)
	}
}

// TestThrottleScheduleSurvivesThresholdChange: a reload that changes the
// threshold keeps each value's schedule, and the fraction of a nanosecond
// carried in the old threshold's units is not read as whole nanoseconds of
// the new one.
func TestThrottleScheduleSurvivesThresholdChange(t *testing.T) {
	r := rules.Param{Resource: "r", Threshold: 1_000_000_007, Throttle: &rules.Throttle{}}
	old, err := Build([]rules.Param{r}, nil, nil)
	require.NoError(t, err)
	be, _ := check(old["r"][0], nil, start, 1, "u") // holds [start, start + 0.99999999 ns)
	require.Nil(t, be)

	r.Threshold = 1 // one per second
	got, err := Build([]rules.Param{r}, old, nil)
	require.NoError(t, err)
	c := got["r"][0]
	be, _ = check(c, nil, start, 1, "u")
	require.NotNil(t, be, "the old slot is still held")
	assert.Equal(t, time.Duration(1), be.RetryAfter)
	be, _ = check(c, nil, start+1, 1, "u")
	require.Nil(t, be, "free from the next nanosecond")
	be, _ = check(c, nil, start+1+int64(time.Second)-1, 1, "u")
	require.NotNil(t, be)
	assert.Equal(t, time.Duration(1), be.RetryAfter)
	be, _ = check(c, nil, start+1+int64(time.Second), 1, "u")
	require.Nil(t, be)
}

// TestOversizedBatch: a batch that can never pass a value's limit is refused
// with that reason, the batch and the limit, no RetryAfter and no state
// change, under every metric and behavior.
func TestOversizedBatch(t *testing.T) {
	tests := []struct {
		name  string
		rule  rules.Param
		limit int64 // the largest batch that can pass
	}{
		{"qps", rules.Param{Threshold: 10}, 10},
		{"qps with burst", rules.Param{Threshold: 10, Burst: 5}, 15},
		{"qps exception", rules.Param{Threshold: 10, Exceptions: map[string]int64{"u": 3}}, 3},
		{"throttle", rules.Param{Threshold: 10, Throttle: &rules.Throttle{MaxQueueing: time.Hour}}, 10},
		{"concurrency", rules.Param{Threshold: 10, Metric: rules.Concurrency}, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCtl(t, tt.rule)
			be, _ := check(c, &waitClock{}, start, tt.limit+1, "u")
			require.NotNil(t, be)
			assert.Equal(t, "batch larger than threshold", be.Reason)
			assert.Equal(t, float64(tt.limit+1), be.Observed)
			assert.Equal(t, float64(tt.limit), be.Threshold)
			assert.Zero(t, be.RetryAfter, "retrying cannot help")
			assert.Zero(t, c.Tracked(), "the refusal tracks nothing")
			be, ec := check(c, &waitClock{}, start, tt.limit, "u")
			require.Nil(t, be, "the largest batch passes a fresh value")
			ec.ReleaseTickets(entry.ExitInfo{Batch: tt.limit})
		})
	}
}

// TestRetryAfterFirstRetryPasses: a refused client that waits exactly
// RetryAfter (the exact wait rounded up to the millisecond) passes on its
// first retry; the exact wait admits and one nanosecond less would not, including when the refused entry started before an entry that
// reached the bucket first (entries read the clock before taking the lock).
func TestRetryAfterFirstRetryPasses(t *testing.T) {
	const ms = int64(time.Millisecond)
	type spend struct{ at, batch int64 }
	tests := []struct {
		name      string
		rule      rules.Param
		before    []spend // admitted entries, in arrival order
		at, batch int64   // the refused entry
		wantRetry time.Duration
	}{
		{"empty bucket", rules.Param{Threshold: 3}, []spend{{0, 3}}, 0, 1, 333_333_334},
		{"batch of two, one third earned", rules.Param{Threshold: 3}, []spend{{0, 3}}, 100 * ms, 2, 566_666_667},
		{"per day with burst", rules.Param{Threshold: 7, Burst: 3, Duration: 24 * time.Hour}, []spend{{0, 10}}, 0, 10, 24*time.Hour*10/7 + 1},
		{"refused entry started before the last refill", rules.Param{Threshold: 1}, []spend{{100, 1}}, 50, 1, time.Second + 50},
		{"far behind the last refill", rules.Param{Threshold: 2, Duration: time.Minute}, []spend{{0, 1}, {40 * int64(time.Second), 1}}, 10 * int64(time.Second), 2, time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			replay := func() *Controller {
				c := newCtl(t, tt.rule)
				for _, s := range tt.before {
					be, _ := check(c, nil, start+s.at, s.batch, "u")
					require.Nil(t, be)
				}
				return c
			}
			c := replay()
			be, _ := check(c, nil, start+tt.at, tt.batch, "u")
			require.NotNil(t, be)
			require.Equal(t, entry.RetryMs(tt.wantRetry), be.RetryAfter, "the exact wait, rounded up to the millisecond")
			exact := start + tt.at + int64(tt.wantRetry)
			early, _ := check(replay(), nil, exact-1, tt.batch, "u")
			assert.NotNil(t, early, "1 ns before the exact wait")
			at, _ := check(replay(), nil, exact, tt.batch, "u")
			assert.Nil(t, at, "at the exact wait")
			be, _ = check(c, nil, start+tt.at+int64(be.RetryAfter), tt.batch, "u")
			assert.Nil(t, be, "first retry")
		})
	}
}

// TestBucketExactCountsUnderConcurrency: 32 goroutines hammer one value at
// the same instants; the admitted total at each instant is exactly what the
// bucket holds there: full, one nanosecond before a window's worth of
// refill, at it, and after a long quiet spell.
func TestBucketExactCountsUnderConcurrency(t *testing.T) {
	const (
		threshold = 50
		burst     = 20
		workers   = 32
	)
	c := newCtl(t, rules.Param{Threshold: threshold, Burst: burst, Duration: time.Minute})
	phases := []struct {
		at   int64
		want int64
	}{
		{0, threshold + burst},
		{int64(time.Minute) - 1, threshold - 1},
		{int64(time.Minute), 1},
		{11 * int64(time.Minute), threshold + burst},
	}
	for _, ph := range phases {
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 2*(threshold+burst)/workers+2; i++ {
					if be, _ := check(c, nil, start+ph.at, 1, "u"); be == nil {
						admitted.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		assert.Equal(t, ph.want, admitted.Load(), "admitted at %v", time.Duration(ph.at))
	}
}

// TestGiveBackAfterRebuild: the tokens of an entry refused by a later check
// reach its value's bucket even when the value's table was rebuilt (its
// state moved to a new array) in between, and reach nothing once the value
// is forgotten.
func TestGiveBackAfterRebuild(t *testing.T) {
	c := newCtl(t, rules.Param{Threshold: 4, Capacity: 100})
	be, ec := check(c, nil, start, 3, "u")
	require.Nil(t, be)
	_, r := c.cache.locate("u")
	s := &c.cache.shards[r.h&c.cache.mask]
	s.mu.Lock()
	before := &s.tab.slots[0]
	s.mu.Unlock()
	for i := 0; i < 60; i++ { // fills and rebuilds u's table without evicting u
		_, _ = check(c, nil, start, 1, i)
	}
	s.mu.Lock()
	rebuilt := &s.tab.slots[0] != before
	s.mu.Unlock()
	require.True(t, rebuilt, "the table was rebuilt")
	ec.ReleaseTickets(entry.ExitInfo{Start: start, End: start, Batch: 3, Blocked: true})
	tok, ok := c.Tokens("u", start)
	require.True(t, ok)
	assert.Equal(t, int64(4), tok, "the tokens came back after the rebuild")

	// Forgotten meanwhile (a value seen once, pushed out by a scan): the
	// give-back goes nowhere, and the value comes back with a full bucket.
	be, ec = check(c, nil, start, 4, "w")
	require.Nil(t, be)
	for i := 0; i < 10_000; i++ {
		_, _ = check(c, nil, start, 1, -i-1)
	}
	_, ok = c.Tokens("w", start)
	require.False(t, ok, "w evicted by the scan")
	ec.ReleaseTickets(entry.ExitInfo{Start: start, End: start, Batch: 4, Blocked: true})
	_, ok = c.Tokens("w", start)
	assert.False(t, ok, "the give-back tracks nothing")
	assert.Equal(t, 100, c.Tracked())
}

// TestThrottleCancelAfterRebuildGivesTheSlotBack: a cancelled wait gives its
// slot back to the value's schedule even when the value's table was rebuilt
// (its state moved to a new array) while it waited. A takes the slot at
// 100 ms and waits; other values fill and rebuild the table; A is
// cancelled: the next entry gets 100 ms again.
func TestThrottleCancelAfterRebuildGivesTheSlotBack(t *testing.T) {
	c := newCtl(t, rules.Param{Threshold: 10, Throttle: &rules.Throttle{MaxQueueing: time.Second}, Capacity: 100})
	run := func(ctx context.Context, clk core.Clock, v string) *core.BlockError {
		return c.CheckKey(ctx, &entry.Context{Resource: "res", Batch: 1, Start: start}, v, clk)
	}
	require.Nil(t, run(context.Background(), &instantClock{}, "u"), "the first passes at once")

	ctx, cancel := context.WithCancel(context.Background())
	sig := &signalClock{asked: make(chan time.Duration, 1)}
	done := make(chan *core.BlockError)
	go func() { done <- run(ctx, sig, "u") }()
	require.Equal(t, 100*time.Millisecond, <-sig.asked, "A waits for the second slot")

	_, r := c.cache.locate("u")
	s := &c.cache.shards[r.h&c.cache.mask]
	s.mu.Lock()
	before := &s.tab.slots[0]
	s.mu.Unlock()
	for i := 0; i < 60; i++ {
		require.Nil(t, run(context.Background(), &instantClock{}, strconv.Itoa(i)))
	}
	s.mu.Lock()
	rebuilt := &s.tab.slots[0] != before
	s.mu.Unlock()
	require.True(t, rebuilt, "the table was rebuilt during the wait")

	cancel()
	be := <-done
	require.NotNil(t, be)
	require.Contains(t, be.Reason, "wait cancelled")

	cc := &instantClock{}
	require.Nil(t, run(context.Background(), cc, "u"))
	require.Equal(t, []time.Duration{100 * time.Millisecond}, cc.waits, "A's slot is offered again")
}
