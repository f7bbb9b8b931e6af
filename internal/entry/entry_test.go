package entry

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/sluicetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recordingTicket records each release into a shared log.
type recordingTicket struct {
	id  int
	log *[]release
}

type release struct {
	id int
	x  ExitInfo
}

func (r *recordingTicket) Release(x ExitInfo) { *r.log = append(*r.log, release{id: r.id, x: x}) }

var _ Ticket = (*recordingTicket)(nil)

func TestEntryContextTickets(t *testing.T) {
	errWork := errors.New("work failed")
	tests := []struct {
		name string
		give int // tickets added
		x    ExitInfo
	}{
		{name: "none", give: 0, x: ExitInfo{Start: 1, End: 2, Batch: 1}},
		{name: "one", give: 1, x: ExitInfo{Start: 10, End: 25, Batch: 1, Err: errWork}},
		{name: "all four inline", give: 4, x: ExitInfo{Start: 5, End: 5, Batch: 2, Blocked: true}},
		{name: "one beyond inline", give: 5, x: ExitInfo{Start: 0, End: 100, Batch: 3}},
		{name: "many beyond inline", give: 11, x: ExitInfo{Start: 7, End: 9, Batch: 1, Err: errWork}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var (
				log []release
				c   Context
			)
			for i := range tt.give {
				c.AddTicket(&recordingTicket{id: i, log: &log})
				require.Equal(t, i+1, c.Tickets())
				require.True(t, c.HoldsTickets())
			}
			require.Equal(t, tt.give, c.Tickets())

			c.ReleaseTickets(tt.x)
			var want []release
			for i := tt.give - 1; i >= 0; i-- {
				want = append(want, release{id: i, x: tt.x})
			}
			require.Equal(t, want, log, "one release per ticket, newest first, with the given ExitInfo")
			require.Zero(t, c.Tickets())
			require.False(t, c.HoldsTickets())

			// Released tickets are forgotten: a second release does nothing.
			c.ReleaseTickets(ExitInfo{Start: 99})
			require.Len(t, log, tt.give)

			// The context can be used again, and holds only new tickets.
			log = log[:0]
			c.AddTicket(&recordingTicket{id: 100, log: &log})
			c.AddTicket(&recordingTicket{id: 101, log: &log})
			require.Equal(t, 2, c.Tickets())
			x := ExitInfo{Start: 1, End: 3, Batch: 1}
			c.ReleaseTickets(x)
			require.Equal(t, []release{{id: 101, x: x}, {id: 100, x: x}}, log)
			require.Zero(t, c.Tickets())
		})
	}
}

func TestExitInfoRT(t *testing.T) {
	tests := []struct {
		name string
		give ExitInfo
		want int64
	}{
		{name: "completed", give: ExitInfo{Start: 1_000, End: 4_500}, want: 3_500},
		{name: "blocked", give: ExitInfo{Start: 7, End: 7, Blocked: true}, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.give.RT())
		})
	}
}

func TestArgsNamed(t *testing.T) {
	str := func(s string) Value { return Value{Str: s, Kind: KindString} }
	anyv := func(v any) Value { return Value{Any: v, Kind: KindAny} }
	named := func(key string, v Value) *Arg { return &Arg{Key: key, Named: true, Value: v} }
	tests := []struct {
		name string
		give Args
		key  string
		want Value
	}{
		{name: "no attachments", give: Args{}, key: "user"},
		{name: "positional only", give: Args{Positional: []any{"user"}, Given: []*Arg{{Index: 0, Value: str("user")}}}, key: "user"},
		{name: "present", give: Args{Given: []*Arg{named("user", str("alice"))}}, key: "user", want: str("alice")},
		{
			name: "among others",
			give: Args{Given: []*Arg{named("a", anyv(1)), named("user", anyv("bob")), named("b", anyv(2))}},
			key:  "user", want: anyv("bob"),
		},
		{
			name: "repeated key: last wins, typed or not",
			give: Args{Given: []*Arg{named("user", str("alice")), named("x", anyv(0)), named("user", Value{Int: 7, Kind: KindInt})}},
			key:  "user", want: Value{Int: 7, Kind: KindInt},
		},
		{name: "nil value is present", give: Args{Given: []*Arg{named("user", anyv(nil))}}, key: "user", want: anyv(nil)},
		{name: "missing", give: Args{Given: []*Arg{named("User", str("alice"))}}, key: "user"},
		{name: "empty key", give: Args{Given: []*Arg{named("", anyv(7))}}, key: "", want: anyv(7)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.give.Named(tt.key)
			if tt.want == (Value{}) {
				require.Nil(t, got)
				return
			}
			require.NotNil(t, got)
			require.Equal(t, tt.want, *got)
		})
	}
}

func TestArgsAt(t *testing.T) {
	typed := func(i int, s string) *Arg { return &Arg{Index: i, Value: Value{Str: s, Kind: KindString}} }
	tests := []struct {
		name      string
		give      Args
		i         int
		wantTyped *Value
		wantAny   any
	}{
		{name: "none", give: Args{}, i: 0},
		{name: "WithArgs", give: Args{Positional: []any{"a", 2}}, i: 1, wantAny: 2},
		{name: "past WithArgs", give: Args{Positional: []any{"a"}}, i: 1},
		{name: "negative", give: Args{Positional: []any{"a"}}, i: -1},
		{name: "nil in WithArgs", give: Args{Positional: []any{nil}}, i: 0},
		{name: "typed", give: Args{Given: []*Arg{typed(3, "x")}}, i: 3, wantTyped: &Value{Str: "x", Kind: KindString}},
		{
			name: "typed takes the place of WithArgs",
			give: Args{Positional: []any{"a", "b"}, Given: []*Arg{typed(1, "x")}},
			i:    1, wantTyped: &Value{Str: "x", Kind: KindString},
		},
		{
			name: "last typed wins",
			give: Args{Given: []*Arg{typed(0, "x"), typed(1, "y"), {Index: 0, Value: Value{Int: 5, Kind: KindInt}}}},
			i:    0, wantTyped: &Value{Int: 5, Kind: KindInt},
		},
		{
			name: "attachments are not positional",
			give: Args{Positional: []any{"a"}, Given: []*Arg{{Key: "k", Named: true, Value: Value{Str: "x", Kind: KindString}}}},
			i:    0, wantAny: "a",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, x := tt.give.At(tt.i)
			require.Equal(t, tt.wantTyped, v)
			require.Equal(t, tt.wantAny, x)
		})
	}
}

// TestContextSleep checks what ends a check's wait: the full wait, the
// caller's context, or the engine's lifetime, whichever comes first.
func TestContextSleep(t *testing.T) {
	guard, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	tests := []struct {
		name string
		end  func(clk *sluicetest.ManualClock, cancelCaller, closeEngine func())
		want error
	}{
		{"full wait", func(clk *sluicetest.ManualClock, _, _ func()) { clk.Advance(time.Second) }, nil},
		{"caller gives up", func(_ *sluicetest.ManualClock, cancelCaller, _ func()) { cancelCaller() }, context.Canceled},
		{"engine closes", func(_ *sluicetest.ManualClock, _, closeEngine func()) { closeEngine() }, ErrClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := sluicetest.NewManualClock(0)
			life, closeEngine := context.WithCancel(context.Background())
			defer closeEngine()
			caller, cancelCaller := context.WithCancel(context.Background())
			defer cancelCaller()
			c := &Context{Life: life}
			errc := make(chan error, 1)
			go func() { errc <- c.Sleep(caller, clk, time.Second) }()
			require.NoError(t, clk.BlockUntil(guard, 1))
			tt.end(clk, cancelCaller, closeEngine)
			select {
			case err := <-errc:
				require.Equal(t, tt.want, err)
			case <-guard.Done():
				t.Fatal("still waiting")
			}
			assert.Zero(t, clk.Waiters())
		})
	}

	t.Run("no wait, no engine", func(t *testing.T) {
		clk := sluicetest.NewManualClock(0)
		c := &Context{}
		require.NoError(t, c.Sleep(context.Background(), clk, 0))
		life, closeEngine := context.WithCancel(context.Background())
		closeEngine()
		c.Life = life
		require.NoError(t, c.Sleep(context.Background(), clk, -1), "a non-positive wait returns at once")
		assert.Zero(t, testing.AllocsPerRun(100, func() { _ = c.Sleep(context.Background(), clk, 0) }))
	})
}

// gateTicket is a ClockGate that answers what it is told and records the
// question.
type gateTicket struct {
	recordingTicket
	need   bool
	failed bool
	est    int64
}

func (g *gateTicket) ExitNeedsClock(failed bool, est int64) bool {
	g.failed, g.est = failed, est
	return g.need
}

// TestExitNeedsClock: what the tickets an entry holds need of its exit's
// clock, by the ExitClock they were added with, and that a release
// forgets it.
func TestExitNeedsClock(t *testing.T) {
	var log []release
	tk := func() *recordingTicket { return &recordingTicket{log: &log} }
	var (
		c      Context
		recent atomic.Int64
	)
	c.Start = 40
	assert.False(t, c.ExitNeedsClock(true, &recent), "no ticket")

	c.AddTicketClock(tk(), ExitUntimed)
	c.AddUndo(tk())
	assert.False(t, c.ExitNeedsClock(true, &recent), "untimed and undo-only tickets")

	g := &gateTicket{recordingTicket: *tk()}
	c.AddTicketClock(g, ExitTimedIfGate)
	assert.False(t, c.ExitNeedsClock(true, &recent))
	assert.True(t, g.failed)
	assert.Equal(t, int64(40), g.est, "the gate is asked with the estimate: the start, later than recent")
	recent.Store(42)
	g.need = true
	assert.True(t, c.ExitNeedsClock(false, &recent), "the gate decides")
	assert.Equal(t, int64(42), g.est, "the estimate: recent, later than the start")

	c.ReleaseTickets(ExitInfo{Batch: 1})
	assert.False(t, c.ExitNeedsClock(true, &recent), "a release forgets the gate")

	// A second gate cannot be asked separately: the exit is timed.
	c.AddTicketClock(&gateTicket{recordingTicket: *tk()}, ExitTimedIfGate)
	c.AddTicketClock(&gateTicket{recordingTicket: *tk()}, ExitTimedIfGate)
	assert.True(t, c.ExitNeedsClock(false, &recent))
	c.ReleaseRefused()
	assert.False(t, c.ExitNeedsClock(false, &recent), "a refusal forgets it too")

	// A gate beyond the inline tickets.
	for range 5 {
		c.AddTicketClock(tk(), ExitUntimed)
	}
	g = &gateTicket{recordingTicket: *tk(), need: true}
	c.AddTicketClock(g, ExitTimedIfGate)
	assert.True(t, c.ExitNeedsClock(false, &recent))
	g.need = false
	assert.False(t, c.ExitNeedsClock(false, &recent))
	c.ReleaseTickets(ExitInfo{Batch: 1})

	// AddTicket and ExitTimed: always timed.
	c.AddTicket(tk())
	assert.True(t, c.ExitNeedsClock(false, &recent))
	c.ReleaseTickets(ExitInfo{Batch: 1})
	c.AddTicketClock(tk(), ExitTimed)
	assert.True(t, c.ExitNeedsClock(false, &recent))
}
