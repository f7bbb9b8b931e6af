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

// TestRun runs the demo for one second and checks its numbers.
//
// The flow rule counts over a sliding second of ten 100 ms buckets that are
// not aligned with the generator's seconds, so under overload the run's one
// second admits between the limit and the limit plus what the first, partial
// bucket held when it slides out (at most a tenth of the offered rate, here
// 30): the bounds below are [0.9·limit, limit + rate/10].
func TestRun(t *testing.T) {
	tests := []struct {
		name        string
		give        config
		wantBlocked bool
	}{
		{
			name:        "overload is cut to the limit",
			give:        config{Duration: time.Second, Rate: 300, Limit: 100, Concurrency: 16, Work: time.Millisecond},
			wantBlocked: true,
		},
		{
			name: "load under the limit all passes",
			give: config{Duration: time.Second, Rate: 50, Limit: 100, Concurrency: 16, Work: time.Millisecond},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := run(context.Background(), tt.give)
			require.NoError(t, err)

			require.Len(t, res.Seconds, 1)
			t.Logf("sent %d: passed %d, blocked %d, dropped %d; passed mean RT %v, p99 %v",
				res.Sent, res.Passed, res.Blocked, res.Dropped, res.Seconds[0].MeanRT, res.Seconds[0].P99RT)
			assert.Zero(t, res.Dropped, "requests the generator could not send")
			assert.Equal(t, tt.give.Rate, res.Sent+res.Dropped, "offered requests")
			// Every response is either 200 or 429.
			assert.Zero(t, res.Failed, "responses neither 200 nor 429")
			assert.Equal(t, res.Sent, res.Passed+res.Blocked)
			// The engine counted exactly what the client saw.
			assert.Equal(t, uint64(res.Passed), res.EnginePassed, "engine pass count")
			assert.Equal(t, uint64(res.Blocked), res.EngineBlocked, "engine block count")

			if !tt.wantBlocked {
				assert.Zero(t, res.Blocked)
				assert.Equal(t, res.Sent, res.Passed)
				return
			}
			limit := tt.give.Limit
			assert.GreaterOrEqual(t, float64(res.Passed), 0.9*limit, "passed in one second")
			assert.LessOrEqual(t, float64(res.Passed), limit+float64(tt.give.Rate)/10, "passed in one second")
			assert.Positive(t, res.Blocked)
			assert.Equal(t, res.Seconds[0].Passed, res.Passed)
			assert.Positive(t, res.Seconds[0].MeanRT)
			assert.GreaterOrEqual(t, res.Seconds[0].P99RT, res.Seconds[0].MeanRT)
			assert.Positive(t, res.BlockedMeanRT)
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
	assert.NotContains(t, out, " \n", "trailing spaces")
}
