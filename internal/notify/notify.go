// Package notify delivers events to listeners in order, one at a time and
// outside every lock: the delivery discipline of an engine's event stream
// (and of its circuit breakers' listeners, whose Hub in internal/degrade
// keeps the same rules).
package notify

import "sync"

// Hub queues events of type T and delivers each, in the order they were
// queued, to every listener registered when it is delivered. It is safe for
// concurrent use; the zero Hub is ready.
//
// Delivery runs on the goroutine of a Publish or Drain call, outside the
// Hub's lock, so a listener may publish (or cause events) itself: those are
// queued and delivered after it returns, by the call already delivering
// (further up the same stack, or on another goroutine). At most one call
// delivers at a time, which is what keeps the order.
type Hub[T any] struct {
	mu        sync.Mutex
	listeners []*listener[T]
	queue     []T
	head      int
	draining  bool
}

type listener[T any] struct{ f func(T) }

// Listen registers f to receive every event delivered after it returns,
// and returns a function that unregisters it (calling that more than once
// does nothing; an event being delivered when it is called may still
// reach f). A nil f is ignored.
func (h *Hub[T]) Listen(f func(T)) (cancel func()) {
	if f == nil {
		return func() {}
	}
	e := &listener[T]{f: f}
	h.mu.Lock()
	// Copy on write: a delivery in progress keeps iterating its own slice.
	h.listeners = append(h.listeners[:len(h.listeners):len(h.listeners)], e)
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		kept := make([]*listener[T], 0, len(h.listeners))
		for _, x := range h.listeners {
			if x != e {
				kept = append(kept, x)
			}
		}
		h.listeners = kept
	}
}

// Listening reports whether any listener is registered.
func (h *Hub[T]) Listening() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.listeners) > 0
}

// Enqueue queues ev without delivering it: a caller that holds a lock of
// its own queues under it (so that events keep that lock's order) and
// calls Drain once it has let go. Events queued while no listener is
// registered are dropped.
func (h *Hub[T]) Enqueue(ev T) {
	h.mu.Lock()
	if len(h.listeners) > 0 {
		h.queue = append(h.queue, ev)
	}
	h.mu.Unlock()
}

// Publish queues ev and delivers what is queued (see Drain).
func (h *Hub[T]) Publish(ev T) {
	h.Enqueue(ev)
	h.Drain()
}

// Drain delivers queued events, in order, unless another call is already
// doing so (possibly further up this goroutine's stack, when a listener
// caused an event): that call delivers them when the current listener
// returns. A panicking listener propagates its panic; the events still
// queued are delivered by the next Drain.
func (h *Hub[T]) Drain() {
	h.mu.Lock()
	if h.draining || h.head == len(h.queue) {
		h.mu.Unlock()
		return
	}
	h.draining = true
	done := false
	defer func() {
		if !done {
			h.mu.Lock()
			h.draining = false
			h.mu.Unlock()
		}
	}()
	var zero T
	for h.head < len(h.queue) {
		ev := h.queue[h.head]
		h.queue[h.head] = zero
		h.head++
		ls := h.listeners
		h.mu.Unlock()
		for _, l := range ls {
			l.f(ev)
		}
		h.mu.Lock()
	}
	h.queue = h.queue[:0]
	h.head = 0
	h.draining = false
	done = true
	h.mu.Unlock()
}
