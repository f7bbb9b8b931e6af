package entry

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-go/sluice/sluicetest"
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
			}
			require.Equal(t, tt.give, c.Tickets())

			c.ReleaseTickets(tt.x)
			var want []release
			for i := tt.give - 1; i >= 0; i-- {
				want = append(want, release{id: i, x: tt.x})
			}
			require.Equal(t, want, log, "one release per ticket, newest first, with the given ExitInfo")
			require.Zero(t, c.Tickets())

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

func TestArgsGet(t *testing.T) {
	tests := []struct {
		name      string
		give      Args
		key       string
		wantValue any
		wantOK    bool
	}{
		{name: "no attachments", give: Args{}, key: "user"},
		{name: "positional only", give: Args{Positional: []any{"user"}}, key: "user"},
		{
			name:      "present",
			give:      Args{Named: []Attachment{{Key: "user", Value: "alice"}}},
			key:       "user",
			wantValue: "alice", wantOK: true,
		},
		{
			name:      "among others",
			give:      Args{Named: []Attachment{{Key: "a", Value: 1}, {Key: "user", Value: "bob"}, {Key: "b", Value: 2}}},
			key:       "user",
			wantValue: "bob", wantOK: true,
		},
		{
			name:      "repeated key: last wins",
			give:      Args{Named: []Attachment{{Key: "user", Value: "alice"}, {Key: "x", Value: 0}, {Key: "user", Value: "carol"}}},
			key:       "user",
			wantValue: "carol", wantOK: true,
		},
		{
			name:   "nil value is present",
			give:   Args{Named: []Attachment{{Key: "user", Value: nil}}},
			key:    "user",
			wantOK: true,
		},
		{
			name: "missing",
			give: Args{Named: []Attachment{{Key: "User", Value: "alice"}}},
			key:  "user",
		},
		{
			name:      "empty key",
			give:      Args{Named: []Attachment{{Key: "", Value: 7}}},
			key:       "",
			wantValue: 7, wantOK: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.give.Get(tt.key)
			assert.Equal(t, tt.wantOK, ok, "Get(%q) ok", tt.key)
			assert.Equal(t, tt.wantValue, got, "Get(%q) value", tt.key)
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
		require.NoError(t, c.Sleep(nil, clk, 0))
		life, closeEngine := context.WithCancel(context.Background())
		closeEngine()
		c.Life = life
		require.NoError(t, c.Sleep(nil, clk, -1), "a non-positive wait returns at once")
		assert.Zero(t, testing.AllocsPerRun(100, func() { _ = c.Sleep(nil, clk, 0) }))
	})
}
