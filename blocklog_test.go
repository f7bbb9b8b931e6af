package sluice

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/rules"
)

// captureHandler keeps every record it handles.
type captureHandler struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *captureHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *captureHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}
func (h *captureHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *captureHandler) WithGroup(string) slog.Handler      { return h }

func (h *captureHandler) take() []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.recs
	h.recs = nil
	return r
}

func attrs(r slog.Record) map[string]string {
	m := map[string]string{}
	r.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.String()
		return true
	})
	return m
}

// TestBlockLogOneRecordPerResourceRuleSecond: 100,000 refusals over four
// seconds, from four goroutines, on three (resource, rule) pairs, give
// exactly one record per pair and second with the exact count.
func TestBlockLogOneRecordPerResourceRuleSecond(t *testing.T) {
	h := &captureHandler{}
	g, clk := newTestEngine(t, 0, WithBlockLog(slog.New(h)))
	mustLoadFlow(t, g,
		rules.Flow{ID: "orders", Resource: "GET /orders", Threshold: 1, StatInterval: time.Minute},
		rules.Flow{Resource: "GET /items", Threshold: 1, StatInterval: time.Minute},
	)
	// The one entry a minute each rule lets through.
	require.True(t, try(g, "GET /orders"))
	require.True(t, try(g, "GET /items"))
	_, err := loadFlow(g, append(g.Rules().Flow, rules.Flow{Metric: rules.Concurrency, ID: "pay-inflight", Resource: "POST /pay", Threshold: 1}))
	require.NoError(t, err)
	held, err := g.Entry("POST /pay")
	require.NoError(t, err)
	defer held.Exit()

	res := []string{"GET /orders", "GET /items", "POST /pay"}
	want := map[string]uint64{} // "resource@second" -> count
	const total, seconds, workers = 100_000, 4, 4
	for s := 0; s < seconds; s++ {
		clk.Set(int64(s)*int64(time.Second) + int64(time.Duration(s)*100*time.Millisecond))
		var wg sync.WaitGroup
		per := total / seconds / workers
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < per; i++ {
					r := res[(i+w+s)%len(res)]
					if _, err := g.Entry(r); err == nil {
						t.Error("passed")
					}
				}
			}()
		}
		wg.Wait()
		for w := 0; w < workers; w++ {
			for i := 0; i < per; i++ {
				want[fmt.Sprintf("%s@%d", res[(i+w+s)%len(res)], s)]++
			}
		}
		if s == 1 {
			// A quiet read in the middle writes the seconds before only.
			_ = g.SystemMetrics().Inbound
		}
	}
	clk.Set(int64(seconds) * int64(time.Second))
	_, _ = g.Snapshot("GET /orders") // writes the last second

	recs := h.take()
	require.Len(t, recs, len(res)*seconds)
	got := map[string]uint64{}
	var sum uint64
	for _, r := range recs {
		a := attrs(r)
		sec := r.Time.Sub(recs[0].Time) / time.Second
		key := fmt.Sprintf("%s@%d", a["resource"], sec)
		_, dup := got[key]
		require.False(t, dup, "two records for %s", key)
		var n uint64
		_, err := fmt.Sscan(a["count"], &n)
		require.NoError(t, err)
		got[key] = n
		sum += n
		assert.Contains(t, r.Message, fmt.Sprintf("%s refused %d by ", a["resource"], n))
		assert.Equal(t, slog.LevelInfo, r.Level)
	}
	assert.Equal(t, want, got)
	assert.Equal(t, uint64(total), sum)

	// The message names the rule, its ID and threshold.
	var orders, items, pay string
	for _, r := range recs {
		switch attrs(r)["resource"] {
		case "GET /orders":
			orders = r.Message
		case "GET /items":
			items = r.Message
		case "POST /pay":
			pay = r.Message
		}
	}
	assert.Regexp(t, `^GET /orders refused \d+ by flow rule "orders" \(threshold 1\) at \d\d:\d\d:\d\d$`, orders)
	assert.Regexp(t, `^GET /items refused \d+ by flow rule \(threshold 1\) at `, items)
	assert.Regexp(t, `^POST /pay refused \d+ by flow rule "pay-inflight" \(threshold 1\) at `, pay)
}

func TestBlockLogBoundedAndFlushedAtClose(t *testing.T) {
	h := &captureHandler{}
	g, clk := newTestEngine(t, 0, WithBlockLog(slog.New(h)))
	var rs []rules.Flow
	for i := 0; i < maxBlockLogKeys+10; i++ {
		rs = append(rs, rules.Flow{Resource: fmt.Sprint("r", i), Threshold: 1})
	}
	mustLoadFlow(t, g, rs...)
	clk.Set(int64(3 * time.Second))
	for _, r := range rs {
		require.False(t, try(g, r.Resource, WithBatch(2))) // larger than the threshold: refused
	}
	require.Empty(t, h.take(), "nothing before the second ends")
	require.NoError(t, g.Close())
	recs := h.take()
	require.Len(t, recs, maxBlockLogKeys+1)
	var sum uint64
	for _, r := range recs {
		var n uint64
		_, _ = fmt.Sscan(attrs(r)["count"], &n)
		sum += n
	}
	assert.Equal(t, uint64(2*len(rs)), sum)
	assert.True(t, strings.HasPrefix(recs[0].Message, "refused 20 beyond the block log's 1024"), recs[0].Message)
}

func TestBlockLogTextOutput(t *testing.T) {
	var buf bytes.Buffer
	g, clk := newTestEngine(t, 0, WithBlockLog(slog.New(slog.NewTextHandler(&buf, nil))))
	mustLoadFlow(t, g, rules.Flow{ID: "q", Resource: "a", Threshold: 1})
	require.True(t, try(g, "a"))
	for i := 0; i < 5; i++ {
		require.False(t, try(g, "a"))
	}
	clk.Advance(time.Second)
	require.False(t, try(g, "a", WithBatch(2))) // writes the second before
	out := buf.String()
	assert.Equal(t, 1, strings.Count(out, "\n"), out)
	assert.Contains(t, out, `resource=a type=flow rule=q threshold=1 count=5`)
}
