package sluiceredis

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// SetLogger routes go-redis's own log lines to l, one line per run of like
// lines: go-redis prints a line for every failed dial ("connection pool:
// failed to dial after 1 attempts: ... connection refused"), ten to twenty
// per instance in an outage of a few seconds, each saying what the first
// said. The first line of a format is written (at Warn level, with the
// message as go-redis formats it); the same format again within 5 s of the
// last one is counted, not written, and the next one written after a quiet
// spell says how many were left out ("left_out"). Together with the
// engine's event stream (one line when the engine falls back, one when it
// recovers), an outage then logs a few lines, not one per dial.
//
// It sets go-redis's process-wide logger (redis.SetLogger), for every
// client of the process. A nil l discards go-redis's lines.
func SetLogger(l *slog.Logger) { redis.SetLogger(newRunLogger(l, time.Now)) }

// runQuiet is how long a format must stay silent before it is written
// again.
const runQuiet = 5 * time.Second

// runLogger writes one line per run of lines of one format.
type runLogger struct {
	l   *slog.Logger
	now func() time.Time

	mu   sync.Mutex
	runs map[string]*logRun
}

type logRun struct {
	last    time.Time
	leftOut int
}

func newRunLogger(l *slog.Logger, now func() time.Time) *runLogger {
	return &runLogger{l: l, now: now, runs: make(map[string]*logRun)}
}

// Printf implements go-redis's logging interface.
func (r *runLogger) Printf(ctx context.Context, format string, v ...interface{}) {
	if r.l == nil {
		return
	}
	now := r.now()
	r.mu.Lock()
	run := r.runs[format]
	if run != nil && now.Sub(run.last) < runQuiet {
		run.last = now
		run.leftOut++
		r.mu.Unlock()
		return
	}
	leftOut := 0
	if run == nil {
		if len(r.runs) >= 64 { // formats are go-redis's constants; bounded all the same
			clear(r.runs)
		}
		run = &logRun{}
		r.runs[format] = run
	}
	leftOut, run.leftOut, run.last = run.leftOut, 0, now
	r.mu.Unlock()
	msg := fmt.Sprintf(format, v...)
	if leftOut > 0 {
		r.l.WarnContext(ctx, msg, "source", "go-redis", "left_out", leftOut)
		return
	}
	r.l.WarnContext(ctx, msg, "source", "go-redis")
}
