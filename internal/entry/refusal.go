package entry

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/internal/core"
)

// Refusals lets a checker's refusals share one *core.BlockError when they
// agree on every field, so that a refusal allocates nothing while its
// rule's state stays the same (docs/design/architecture.md, "A refusal
// allocates nothing"). It holds the latest refusal, which nothing modifies
// once made: the caller of Entry owns an error that never changes.
//
// A checker whose refusals a caller may modify afterwards (a cluster
// rule's fallback rewriting Type or Reason, a caller-flow rule's Type)
// must not share them. The zero value is ready; it must not be copied
// after first use.
type Refusals struct {
	last atomic.Pointer[core.BlockError]
}

// Share returns a refusal equal to *want: the latest one when every field
// agrees, else a new copy of *want, which becomes the latest. want is not
// kept. A refusal with a Cause is never shared (the cause is the caller's
// own error, and may not be comparable).
func (s *Refusals) Share(want *core.BlockError) *core.BlockError {
	if want.Cause != nil {
		be := *want
		return &be
	}
	if be := s.last.Load(); be != nil && *be == *want {
		return be
	}
	be := new(core.BlockError)
	*be = *want
	s.last.Store(be)
	return be
}

// RetryMs is d rounded up to the millisecond: the precision of the
// RetryAfter of refusals that share their error. It only lengthens the
// wait (by less than 1 ms), and leaves the whole seconds of the
// Retry-After header as they were. A wait within a millisecond of the
// longest time.Duration is the longest one.
func RetryMs(d time.Duration) time.Duration {
	if r := d % time.Millisecond; r > 0 {
		if d > math.MaxInt64-time.Millisecond {
			return math.MaxInt64
		}
		d += time.Millisecond - r
	}
	return d
}
