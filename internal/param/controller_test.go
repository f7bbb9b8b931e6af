package param

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/atomic"
	"go.uber.org/goleak"

	"github.com/sluice-go/sluice/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
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
	assert.Equal(t, time.Second/3+1, be.RetryAfter) // 333,333,333.33 ns, rounded up
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
			require.Equal(t, time.Duration(per), be.RetryAfter)
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
		{"attachment", rules.Param{Key: "ip"}, entry.Args{Positional: []any{"a"}, Named: []entry.Attachment{{Key: "ip", Value: "10.0.0.1"}}}, "10.0.0.1"},
		{"last attachment wins", rules.Param{Key: "ip"}, entry.Args{Named: []entry.Attachment{{Key: "ip", Value: "x"}, {Key: "ip", Value: "y"}}}, "y"},
		{"missing attachment", rules.Param{Key: "ip"}, entry.Args{Positional: []any{"a"}}, ""},
		{"int is its decimal form", rules.Param{}, entry.Args{Positional: []any{uint16(42)}}, "42"},
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
	c := newCtl(t, rules.Param{Threshold: 10, Behavior: rules.Throttle, MaxQueueing: 250 * time.Millisecond})
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
	c := newCtl(t, rules.Param{Threshold: 3, Duration: 24 * time.Hour, Behavior: rules.Throttle})
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
				passed.Inc()
				n := inside[k].Inc()
				for {
					m := maxSeen[k].Load()
					if n <= m || maxSeen[k].CompareAndSwap(m, n) {
						break
					}
				}
				inside[k].Dec()
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
	old, err := Build([]rules.Param{base}, nil)
	require.NoError(t, err)
	require.Equal(t, 2, admit(old["r"][0], start, "u", 2))

	t.Run("invalid rule refused whole", func(t *testing.T) {
		_, err := Build([]rules.Param{base, {Resource: "r", Threshold: 0}}, old)
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
			got, err := Build([]rules.Param{tt.give}, old)
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
	r, ok := be.Rule.(*rules.Param)
	require.True(t, ok, "%T", be.Rule)
	assert.Equal(t, "per-user", r.ID)
	assert.Contains(t, be.Error(), "blocked by param rule")
}

func TestWaitSaturates(t *testing.T) {
	c := newCtl(t, rules.Param{Threshold: 1, Duration: rules.MaxParamDuration})
	assert.Equal(t, int64(rules.MaxParamDuration), c.wait(1, 0, 1))
	assert.Equal(t, int64(math.MaxInt64), c.wait(math.MaxInt64, 0, 1))
	assert.Equal(t, int64(rules.MaxParamDuration)-5, c.wait(1, 5, 1))
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
