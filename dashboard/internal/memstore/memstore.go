// Package memstore keeps instances' frames in memory: the
// cluster.Telemetry of a dashboard that shows one engine of its own process
// (its frames stay in the process; its rules are in a rule store).
package memstore

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/sluice-go/sluice/cluster"
)

// Store is an in-memory cluster.Telemetry, bounded as the interface asks:
// the last keep frames of each instance, forgotten ttl after its last
// Publish. It is safe for concurrent use.
type Store struct {
	now func() time.Time

	mu     sync.Mutex
	frames map[string]map[string]*frames // app -> instance
}

type frames struct {
	list    []cluster.Frame
	expires time.Time
}

// New returns an empty Store reading the time with now (nil: time.Now).
func New(now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{now: now, frames: map[string]map[string]*frames{}}
}

var _ cluster.Telemetry = (*Store)(nil)

// Publish implements cluster.Telemetry.
func (s *Store) Publish(ctx context.Context, f cluster.Frame, keep int, ttl time.Duration) error {
	if f.App == "" || f.Instance == "" {
		return fmt.Errorf("memstore: frame without app or instance")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.frames[f.App]
	if m == nil {
		m = map[string]*frames{}
		s.frames[f.App] = m
	}
	fs := m[f.Instance]
	if fs == nil {
		fs = &frames{}
		m[f.Instance] = fs
	}
	fs.list = append(fs.list, f)
	if len(fs.list) > keep {
		fs.list = slices.Delete(fs.list, 0, len(fs.list)-keep)
	}
	fs.expires = s.now().Add(ttl)
	return nil
}

// Frames implements cluster.Telemetry.
func (s *Store) Frames(ctx context.Context, name string, since int64) ([]cluster.Frame, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	m := s.frames[name]
	ids := make([]string, 0, len(m))
	for id, fs := range m {
		if now.After(fs.expires) {
			delete(m, id)
			continue
		}
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var out []cluster.Frame
	for _, id := range ids {
		for _, f := range m[id].list {
			if f.Second >= since {
				out = append(out, f)
			}
		}
	}
	return out, nil
}
