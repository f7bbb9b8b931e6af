package sluice

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/internal/degrade"
	"github.com/sluice-go/sluice/stat"
)

// Subscribe registers f to receive the engine's events from now on (rule
// loads and refusals, circuit-breaker transitions, system protection
// starting and stopping to shed, limits shared across instances falling
// back and recovering, watches firing and clearing: see stat.EventKind),
// and returns a function that unregisters it (calling that more than once
// does nothing).
//
// Subscribers receive every event in the order it happened, each exactly
// once, one at a time and outside every lock of the engine. They run on the
// goroutine that caused (or was delivering) the event: a rule load, an
// Entry or Exit, the system metrics sampler, the watches' evaluator, or a
// call that noticed that shedding stopped. So they should be quick. A subscriber may call back
// into the engine (Entry, rule loading): the events it causes are delivered
// after it returns. A panic in a subscriber propagates to that call; later
// events are still delivered. An engine with no subscriber queues nothing.
// A nil f is ignored.
func (eng *Engine) Subscribe(f func(stat.Event)) (cancel func()) {
	return eng.events.Listen(f)
}

// breakerEvent forwards a circuit-breaker transition to the event stream.
// It runs as a breaker listener: in order and outside the breakers' locks.
func (eng *Engine) breakerEvent(t degrade.Transition) {
	eng.events.Publish(stat.Event{
		Kind: stat.EventBreaker, At: t.At, Resource: t.Resource, Rule: t.Rule,
		From: t.From.String(), To: t.To.String(), Value: t.Snapshot,
	})
}

// clusterEvent reports that the limit shared across instances on resource
// fell back to deciding locally (fallback set, cause the store's error) or
// reaches its store again. The engine side of cluster limits
// (internal/lease) calls it from its breaker's transitions.
// live, when given, is the instance count local shares divide by (Value).
func (eng *Engine) clusterEvent(resource string, fallback bool, cause error, live ...int) {
	ev := stat.Event{Kind: stat.EventClusterRecovered, At: eng.clock.Nanotime(), Resource: resource}
	if len(live) > 0 {
		ev.Value = float64(live[0])
	}
	if fallback {
		ev.Kind, ev.Err = stat.EventClusterFallback, cause
	}
	eng.events.Publish(ev)
}

// shedQuiet is how long system protection must refuse nothing before it is
// said to have stopped shedding.
const shedQuiet = int64(time.Second)

// shedding follows whether system protection is refusing entries, for
// EventSheddingStarted and EventSheddingStopped. Only the blocked path of
// a system refusal writes it (one atomic store, and the lock when shedding
// starts); nothing on the pass path reads it.
type shedding struct {
	on   atomic.Bool
	last atomic.Int64 // clock reading of the last system refusal
	mu   sync.Mutex   // orders the transitions and their events
}

// systemRefused notes a system refusal at now, starting shedding (and
// reporting it) when it was off; a refusal after a quiet second that no
// one noticed reports the stop first.
func (eng *Engine) systemRefused(now int64) {
	sh := &eng.shed
	prev := sh.last.Swap(now)
	if sh.on.Load() && now-prev < shedQuiet {
		return
	}
	sh.mu.Lock()
	if sh.on.Load() && now-prev >= shedQuiet {
		sh.on.Store(false)
		eng.events.Enqueue(stat.Event{Kind: stat.EventSheddingStopped, At: now})
	}
	if !sh.on.Load() {
		sh.on.Store(true)
		eng.events.Enqueue(stat.Event{Kind: stat.EventSheddingStarted, At: now})
	}
	sh.mu.Unlock()
	eng.events.Drain()
}

// noticeShedding reports that shedding stopped when system protection has
// refused nothing for shedQuiet before now, and writes the block log's
// records of the seconds before now. It is called off the request path: by
// the sampler after each sample, and by History, Snapshot, SystemMetrics
// and Each.
func (eng *Engine) noticeShedding(now int64) {
	if eng.blocks != nil {
		eng.blocks.flush(now)
	}
	sh := &eng.shed
	if !sh.on.Load() || now-sh.last.Load() < shedQuiet {
		return
	}
	sh.mu.Lock()
	if sh.on.Load() && now-sh.last.Load() >= shedQuiet {
		sh.on.Store(false)
		eng.events.Enqueue(stat.Event{Kind: stat.EventSheddingStopped, At: now})
	}
	sh.mu.Unlock()
	eng.events.Drain()
}
