package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun runs the demo for one second and checks what the code guarantees,
// whatever the host's scheduling: the generator offers exactly Rate requests
// (sending or dropping each), every answer is 200 or 429, the engine counts
// what the client saw, and the flow rule holds.
//
// What it does not check: that the generator sent everything (it drops a
// request when all its workers are busy, which a busy host causes), or a
// passed count near the limit. The rule counts over a sliding window of ten
// 100 ms buckets: at most Limit admissions in any ten consecutive buckets.
// So a request refused means the window already held Limit passes of this
// run (the engine is new), and the run's passes fit into the buckets its
// time span touches, Limit per ten of them.
func TestRun(t *testing.T) {
	tests := []struct {
		name string
		give config
	}{
		{
			name: "overload is cut to the limit",
			give: config{Duration: time.Second, Rate: 300, Limit: 100, Concurrency: 16, Work: time.Millisecond},
		},
		{
			name: "load under the limit all passes",
			give: config{Duration: time.Second, Rate: 50, Limit: 100, Concurrency: 16, Work: time.Millisecond},
		},
		{
			// Four workers and a 50 ms handler send at most about 80 of
			// the 300: a generator starved as on a busy host.
			name: "a saturated generator drops requests",
			give: config{Duration: time.Second, Rate: 300, Limit: 100, Concurrency: 4, Work: 50 * time.Millisecond},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			res, err := run(context.Background(), tt.give)
			span := time.Since(start) // contains every admission of the run
			require.NoError(t, err)

			require.Len(t, res.Seconds, 1)
			t.Logf("sent %d: passed %d, blocked %d, dropped %d; passed mean RT %v, p99 %v; run took %v",
				res.Sent, res.Passed, res.Blocked, res.Dropped, res.Seconds[0].MeanRT, res.Seconds[0].P99RT, span)
			assert.Equal(t, tt.give.Rate, res.Sent+res.Dropped, "offered requests: sent or dropped")
			// Every response is either 200 or 429.
			assert.Zero(t, res.Failed, "responses neither 200 nor 429")
			assert.Equal(t, res.Sent, res.Passed+res.Blocked)
			// The engine counted exactly what the client saw.
			assert.Equal(t, uint64(res.Passed), res.EnginePassed, "engine pass count")
			assert.Equal(t, uint64(res.Blocked), res.EngineBlocked, "engine block count")
			assert.Equal(t, res.Seconds[0].Passed, res.Passed)
			assert.Equal(t, res.Seconds[0].Dropped, res.Dropped)

			limit := int(tt.give.Limit)
			if res.Sent <= limit {
				// No ten buckets can hold more than were sent.
				assert.Zero(t, res.Blocked, "refused with fewer requests than the limit")
			}
			// A refusal comes only from a window that holds limit passes.
			assert.GreaterOrEqual(t, res.Passed, min(res.Sent, limit), "passed")
			// The span touches at most span/100ms + 2 buckets.
			buckets := int(span/(100*time.Millisecond)) + 2
			most := limit * ((buckets + 9) / 10)
			assert.LessOrEqual(t, res.Passed, most, "passed within %v (%d buckets)", span, buckets)
			if res.Sent > most {
				assert.Positive(t, res.Blocked)
			}
			if res.Passed > 0 {
				assert.Positive(t, res.Seconds[0].MeanRT)
				assert.Positive(t, res.Seconds[0].P99RT)
			}
			if res.Blocked > 0 {
				assert.Positive(t, res.BlockedMeanRT)
			}
		})
	}
}

func TestRunContextCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := run(ctx, config{Duration: time.Second, Rate: 100})
	require.ErrorIs(t, err, context.Canceled)
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		give    config
		wantErr string
	}{
		{name: "defaults", give: config{}},
		{name: "negative duration", give: config{Duration: -time.Second}, wantErr: "duration"},
		{name: "huge duration", give: config{Duration: 2 * time.Hour}, wantErr: "duration"},
		{name: "negative rate", give: config{Rate: -1}, wantErr: "rate"},
		{name: "huge rate", give: config{Rate: maxRate + 1}, wantErr: "rate"},
		{name: "negative limit", give: config{Limit: -1}, wantErr: "limit"},
		{name: "negative concurrency", give: config{Concurrency: -1}, wantErr: "concurrency"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.give.withDefaults().validate()
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

func TestMeanP99(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name     string
		give     []time.Duration
		wantMean time.Duration
		wantP99  time.Duration
	}{
		{name: "empty"},
		{name: "one", give: []time.Duration{3 * ms}, wantMean: 3 * ms, wantP99: 3 * ms},
		{name: "unsorted", give: []time.Duration{3 * ms, 1 * ms, 2 * ms}, wantMean: 2 * ms, wantP99: 3 * ms},
	}
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(100-i) * ms // 100 ms down to 1 ms
	}
	tests = append(tests, struct {
		name     string
		give     []time.Duration
		wantMean time.Duration
		wantP99  time.Duration
	}{name: "hundred", give: hundred, wantMean: 50500 * time.Microsecond, wantP99: 99 * ms})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mean, p99 := meanP99(tt.give)
			assert.Equal(t, tt.wantMean, mean, "mean")
			assert.Equal(t, tt.wantP99, p99, "p99")
		})
	}
}

func TestReport(t *testing.T) {
	r := result{Config: config{Duration: time.Second, Rate: 300, Limit: 100}.withDefaults(), Address: "127.0.0.1:1"}
	r.tally([]sample{
		{sec: 0, status: 200, rt: 2 * time.Millisecond},
		{sec: 0, status: 429, rt: time.Millisecond},
	}, []int{0})
	var b bytes.Buffer
	report(&b, r)
	out := b.String()
	assert.Contains(t, out, "passed (200)")
	assert.Contains(t, out, "2.00ms")
	assert.Contains(t, out, "limit:   100 req/s")
	// The legend says why a second may show more passes than the limit.
	assert.Contains(t, out, "sliding window of ten 100 ms buckets")
	assert.Contains(t, out, "at most 100 requests in\nany ten consecutive buckets")
	assert.Contains(t, out, "docs/design/architecture.md")
	assert.NotContains(t, out, " \n", "trailing spaces")
}
