package refusal

import (
	"strings"
	"sync"
	"sync/atomic"
)

// maxNames bounds a Names cache; names beyond it are built per request.
const maxNames = 1024

type nameKey struct{ method, template string }

// Names caches "METHOD template" resource names, so that naming a routed
// request costs a map read and no allocation. Reads are lock-free; a new
// name copies the map. It holds at most 1024 names; beyond that, names are
// built per call. The zero value is ready to use, and it is safe for
// concurrent use. The gin adapter's module holds a generated copy of this
// file (go run ./internal/cmd/modules copies).
type Names struct {
	m  atomic.Pointer[map[nameKey]string]
	mu sync.Mutex
}

// Get returns method + " " + template, from the cache when it is there.
func (n *Names) Get(method, template string) string {
	if m := n.m.Load(); m != nil {
		if s, ok := (*m)[nameKey{method, template}]; ok {
			return s
		}
	}
	return n.add(method, template)
}

func (n *Names) add(method, template string) string {
	s := method + " " + template
	n.mu.Lock()
	defer n.mu.Unlock()
	var old map[nameKey]string
	if m := n.m.Load(); m != nil {
		old = *m
	}
	if len(old) >= maxNames {
		return s
	}
	m := make(map[nameKey]string, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[nameKey{strings.Clone(method), strings.Clone(template)}] = s
	n.m.Store(&m)
	return s
}
