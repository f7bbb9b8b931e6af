package sluice

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sluice-go/sluice/internal/core"
)

// WithBlockLog makes the engine log its refusals to l, summarised: at most
// one record per resource, rule and second of the engine's clock, such as
//
//	GET /orders refused 412 by flow rule "orders" (threshold 500) at 12:01:07
//
// with the attributes resource, type (the block type), rule (the rule's ID,
// empty when it has none), threshold, count (requests refused, by batch)
// and second (and shadow=true for what a rule in shadow mode would have
// refused: "... would have refused 412 by flow shadow rule ..."), at level
// Info, stamped with the second's wall-clock time. A
// second's records are written at the first refusal of a later second, at
// the next call of Snapshot, SystemMetrics, History or Each, at the next
// sample of the system metrics sampler, or at Close, whichever comes first,
// from that goroutine. At most 1,024
// (resource, rule) pairs are kept per second; refusals beyond them are
// summed into one record with an empty resource. Nil (the default) logs
// nothing; then a refusal pays one pointer check for the feature. With a
// logger, each refusal takes a short lock of the engine's block log.
func WithBlockLog(l *slog.Logger) Option { return func(cf *config) { cf.blockLog = l } }

// maxBlockLogKeys bounds the (resource, rule) pairs the block log counts in
// one second (see WithBlockLog).
const maxBlockLogKeys = 1024

// blockLog counts refusals per (resource, rule) of the current second.
type blockLog struct {
	log    *slog.Logger
	wall0  time.Time // the wall-clock time of clock reading clock0
	clock0 int64

	mu     sync.Mutex
	sec    int64 // the second being counted
	counts map[blockKey]*blockCount
	other  uint64 // refusals beyond maxBlockLogKeys in this second
}

// blockKey is a (resource, rule) pair: the rule is the refusal's Rule.
// caller is the refused entry's (WithCaller), so that a record names who
// was refused; a shadow refusal's is empty.
type blockKey struct {
	resource string
	caller   string
	typ      core.BlockType
	rule     core.RuleRef
	shadow   bool // a rule in shadow mode would have refused (see shadow.go)
}

type blockCount struct {
	n         uint64
	id        string
	threshold float64
}

func newBlockLog(l *slog.Logger, clock core.Clock) *blockLog {
	return &blockLog{log: l, wall0: time.Now(), clock0: clock.Nanotime(), counts: map[blockKey]*blockCount{}}
}

// note counts a refusal be of batch requests at now, and writes the records
// of the second before when now is in a new one.
// resource names the entry's resource when be does not.
func (b *blockLog) note(be *core.BlockError, resource string, batch, now int64) {
	b.noteCaller(be, resource, "", batch, now)
}

// noteCaller is note for the refusal of an entry of caller (not kept: a
// new record copies it).
func (b *blockLog) noteCaller(be *core.BlockError, resource, caller string, batch, now int64) {
	if be.Resource != "" {
		resource = be.Resource
	}
	k := blockKey{resource: resource, caller: caller, typ: be.Type, rule: be.Rule, shadow: be.Shadow}
	b.mu.Lock()
	flush := b.rollLocked(now)
	if c := b.counts[k]; c != nil {
		c.n += uint64(batch)
	} else if len(b.counts) < maxBlockLogKeys {
		// A key of its own, so that caller (the entry's) never reaches the map.
		kept := blockKey{resource: resource, caller: strings.Clone(caller), typ: be.Type, rule: be.Rule, shadow: be.Shadow}
		b.counts[kept] = &blockCount{n: uint64(batch), id: be.Rule.ID, threshold: be.Threshold}
	} else {
		b.other += uint64(batch)
	}
	b.mu.Unlock()
	flush()
}

// flush writes the records of the seconds before the one of now.
func (b *blockLog) flush(now int64) {
	b.mu.Lock()
	f := b.rollLocked(now)
	b.mu.Unlock()
	f()
}

// flushAll writes every record counted.
func (b *blockLog) flushAll() {
	b.mu.Lock()
	f := b.takeLocked()
	b.mu.Unlock()
	f()
}

// rollLocked moves the counting to the second of now, and returns the
// function that writes what the second before counted (to be called
// without the lock). Must hold b.mu.
func (b *blockLog) rollLocked(now int64) func() {
	sec := now / int64(time.Second)
	if sec == b.sec {
		return func() {}
	}
	f := b.takeLocked()
	b.sec = sec
	return f
}

// takeLocked empties the counts and returns the function that logs them.
// Must hold b.mu.
//
// complexity: empties the per-rule counts and builds the one log line for them, under the lock
func (b *blockLog) takeLocked() func() {
	if len(b.counts) == 0 && b.other == 0 {
		return func() {}
	}
	type rec struct {
		k blockKey
		c *blockCount
	}
	recs := make([]rec, 0, len(b.counts)+1)
	for k, c := range b.counts {
		recs = append(recs, rec{k, c})
	}
	if b.other > 0 {
		recs = append(recs, rec{blockKey{}, &blockCount{n: b.other}})
	}
	b.counts = map[blockKey]*blockCount{}
	b.other = 0
	sort.Slice(recs, func(i, j int) bool {
		a, c := recs[i], recs[j]
		if a.k.resource != c.k.resource {
			return a.k.resource < c.k.resource
		}
		if a.k.typ != c.k.typ {
			return a.k.typ < c.k.typ
		}
		if a.c.id != c.c.id {
			return a.c.id < c.c.id
		}
		return !a.k.shadow && c.k.shadow
	})
	at := b.wall0.Add(time.Duration(b.sec*int64(time.Second) - b.clock0))
	return func() {
		ctx := context.Background()
		h := b.log.Handler()
		if !h.Enabled(ctx, slog.LevelInfo) {
			return
		}
		for _, r := range recs {
			var msg string
			if r.k.resource == "" && r.k.typ == 0 {
				msg = fmt.Sprintf("refused %d beyond the block log's %d resources and rules at %s", r.c.n, maxBlockLogKeys, at.Format(time.TimeOnly))
			} else {
				rule := " rule"
				if r.c.id != "" {
					rule += fmt.Sprintf(" %q", r.c.id)
				}
				verb := "refused"
				if r.k.shadow {
					verb, rule = "would have refused", " shadow"+rule
				}
				from := ""
				if r.k.caller != "" {
					from = fmt.Sprintf(" from %q", r.k.caller)
				}
				msg = fmt.Sprintf("%s %s %d%s by %s%s (threshold %g) at %s", r.k.resource, verb, r.c.n, from, r.k.typ, rule, r.c.threshold, at.Format(time.TimeOnly))
			}
			rc := slog.NewRecord(at, slog.LevelInfo, msg, 0)
			rc.AddAttrs(
				slog.String("resource", r.k.resource),
				slog.String("type", r.k.typ.String()),
				slog.String("rule", r.c.id),
				slog.Float64("threshold", r.c.threshold),
				slog.Uint64("count", r.c.n),
				slog.Time("second", at),
			)
			if r.k.shadow {
				rc.AddAttrs(slog.Bool("shadow", true))
			}
			if r.k.caller != "" {
				rc.AddAttrs(slog.String("caller", r.k.caller))
			}
			_ = h.Handle(ctx, rc)
		}
	}
}
