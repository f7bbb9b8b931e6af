package sluice

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"
)

// The refused callers of each resource, per second of the engine's clock,
// for the telemetry frames a fleet member publishes (cluster.ResourceSecond
// .Callers): no metric gets a caller label (their number is whatever
// callers send), so the dashboard learns who is refused from the frames.
// Counting starts when a publisher asks for it (fleetlink.CountCallers);
// an engine that publishes nothing pays one pointer load per refusal.
//
// Memory is bounded whatever callers send: per second at most
// maxCallerResources resources, each with callerSlots counters kept by
// the Space-Saving algorithm (Metwally et al., 2005). A caller refused
// more than 1/callerSlots of a resource's refusals in the second is
// always among them; with at most callerSlots callers the counts are
// exact, else a count may be over by at most the smallest count kept.
// Caller names are at most 256 bytes (WithCaller), so a second holds at
// most 256 × 16 × 256 bytes = 1 MiB of names, two seconds are kept.
const (
	maxCallerResources = 256
	callerSlots        = 16
	// topCallers is the most callers a frame carries for a resource.
	topCallers = 10
)

// callerTally counts refused callers per resource for the current and the
// previous second.
type callerTally struct {
	mu        sync.Mutex
	sec, prev int64 // the seconds of cur and old
	cur, old  map[string]*callerSlotsOf
}

// callerSlotsOf is one resource's Space-Saving counters in one second.
type callerSlotsOf struct {
	used  int
	name  [callerSlots]string
	count [callerSlots]uint64
}

func newCallerTally() *callerTally {
	return &callerTally{sec: -1, prev: -1, cur: map[string]*callerSlotsOf{}}
}

// note counts batch refusals of caller (non-empty) on resource at now.
// resource is the registry's name (kept as is); caller is copied when kept.
func (t *callerTally) note(resource, caller string, batch, now int64) {
	sec := now / int64(time.Second)
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.cur
	switch {
	case sec == t.sec:
	case sec == t.prev && t.old != nil:
		m = t.old // an entry of the second before, refused after a later one
	case sec < t.sec:
		return // its second is gone
	default:
		t.old, t.prev = nil, -1
		if sec == t.sec+1 {
			t.old, t.prev = t.cur, t.sec
		}
		t.cur, t.sec = map[string]*callerSlotsOf{}, sec
		m = t.cur
	}
	s := m[resource]
	if s == nil {
		if len(m) >= maxCallerResources {
			return
		}
		s = &callerSlotsOf{}
		m[resource] = s
	}
	s.add(caller, uint64(batch))
}

// add counts n for caller: its own slot, a free one, or the smallest
// count's (which it takes over, adding n to that count).
func (s *callerSlotsOf) add(caller string, n uint64) {
	for i := 0; i < s.used; i++ {
		if s.name[i] == caller {
			s.count[i] += n
			return
		}
	}
	i := s.used
	if i < callerSlots {
		s.used++
	} else {
		i = 0
		for j := 1; j < callerSlots; j++ {
			if s.count[j] < s.count[i] {
				i = j
			}
		}
	}
	s.name[i] = strings.Clone(caller)
	s.count[i] += n
}

// top returns the most refused callers of resource in second sec (at most
// topCallers, by count then name), or nil.
func (t *callerTally) top(resource string, sec int64) map[string]uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var s *callerSlotsOf
	switch sec {
	case t.sec:
		s = t.cur[resource]
	case t.prev:
		s = t.old[resource]
	}
	if s == nil || s.used == 0 {
		return nil
	}
	idx := make([]int, s.used)
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		if c := cmp.Compare(s.count[b], s.count[a]); c != 0 {
			return c
		}
		return strings.Compare(s.name[a], s.name[b])
	})
	out := make(map[string]uint64, min(len(idx), topCallers))
	for _, i := range idx[:min(len(idx), topCallers)] {
		out[s.name[i]] = s.count[i]
	}
	return out
}
