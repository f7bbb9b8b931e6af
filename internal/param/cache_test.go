package param

import (
	"hash/maphash"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/ruledef"
	"github.com/sluice-go/sluice/rules"
)

func TestShardSizing(t *testing.T) {
	tests := []struct {
		capacity   int
		wantShards int
	}{
		{1, 1},
		{64, 1},
		{127, 1},
		{128, 2},
		{10_000, 64},
		{ruledef.MaxParamCapacity, 64},
	}
	for _, tt := range tests {
		c := newCache(tt.capacity, modeReject)
		require.Len(t, c.shards, tt.wantShards, "shards of capacity %d", tt.capacity)
		total := 0
		for i := range c.shards {
			require.Positive(t, c.shards[i].cap)
			total += c.shards[i].cap
		}
		assert.Equal(t, tt.capacity, total, "capacity %d split exactly", tt.capacity)
	}
}

// touch looks up key in c as a check does.
func touch(c *cache, key string) *keyState {
	s, r := c.locate(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.get(&r, 0, 0)
}

func TestCacheScanResistance(t *testing.T) {
	tests := []struct {
		name     string
		capacity int
	}{
		{"one shard", 100},
		{"sharded", 10_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCache(tt.capacity, modeReject)
			hot := tt.capacity / 4
			for round := 0; round < 2; round++ {
				for i := 0; i < hot; i++ {
					touch(c, "hot-"+strconv.Itoa(i))
				}
			}
			// A scan of cold values, each seen once, 50 times the capacity.
			for i := 0; i < 50*tt.capacity; i++ {
				touch(c, "cold-"+strconv.Itoa(i))
				if i%997 == 0 {
					require.LessOrEqual(t, c.len(), tt.capacity)
				}
			}
			require.Equal(t, tt.capacity, c.len())
			for i := 0; i < hot; i++ {
				_, ok := c.lookup("hot-" + strconv.Itoa(i))
				require.True(t, ok, "hot value %d evicted by the scan", i)
			}
		})
	}
}

func TestCacheGhostReadmits(t *testing.T) {
	c := newCache(20, modeReject) // one shard: small queue 2, main 18
	touch(c, "a")
	for i := 0; i < 20; i++ { // push "a" (seen once) out of the small queue
		touch(c, strconv.Itoa(i))
	}
	_, ok := c.lookup("a")
	require.False(t, ok)
	e := touch(c, "a")
	assert.True(t, e.inMain(), "a value evicted recently comes back into the main queue")
	assert.Equal(t, 20, c.len())
}

// TestMillionKeys drives one million distinct values through a rule with the
// default capacity: tracked state stays within the bound, and hot values
// (with spent buckets) survive the scan with their state.
func TestMillionKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("one million checks")
	}
	const (
		capacity = ruledef.ParamCapacity
		hot      = 1000
		keys     = 1_000_000
	)
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapInuse

	c := newCtl(t, rules.Param{Threshold: 3, Duration: 60_000_000_000})
	for round := 0; round < 3; round++ {
		for i := 0; i < hot; i++ {
			_, _ = check(c, nil, start, 1, "hot-"+strconv.Itoa(i))
		}
	}
	for i := 0; i < keys; i++ {
		if be, _ := check(c, nil, start, 1, i); be != nil {
			t.Fatalf("cold value %d refused: %v", i, be)
		}
		if i%10_007 == 0 {
			require.LessOrEqual(t, c.Tracked(), capacity)
		}
	}
	require.Equal(t, capacity, c.Tracked())
	for i := 0; i < hot; i++ {
		tok, ok := c.Tokens("hot-"+strconv.Itoa(i), start)
		require.True(t, ok, "hot value %d evicted", i)
		require.Equal(t, int64(0), tok, "hot value %d kept its spent bucket", i)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	t.Logf("1M distinct values, capacity %d: tracked %d, HeapInuse before %.1f MiB, after %.1f MiB (+%.1f MiB)",
		capacity, c.Tracked(), float64(before)/(1<<20), float64(ms.HeapInuse)/(1<<20), (float64(ms.HeapInuse)-float64(before))/(1<<20))
	runtime.KeepAlive(c)
}

func TestCacheHashCollisions(t *testing.T) {
	c := newCache(8, modeReject) // room for all five: no eviction
	s := &c.shards[0]
	s.mu.Lock()
	defer s.mu.Unlock()
	// Five values forced onto one hash: three short, two long ones whose
	// fingerprints differ in their second half only.
	long := strings.Repeat("x", maxKeyLen+1) // only the fingerprint counts
	refs := []ref{{key: "a", h: 7}, {key: "b", h: 7}, {key: "d", h: 7}, {key: long, h: 7, h2: 1}, {key: long, h: 7, h2: 2}}
	es := make([]*keyState, len(refs))
	for i := range refs {
		es[i] = s.get(&refs[i], int64(i), 0)
	}
	for i := range refs {
		assert.Same(t, es[i], s.find(&refs[i]), "find %d", i)
	}
	assert.Nil(t, s.find(&ref{key: "e", h: 7}))
	assert.Nil(t, s.find(&ref{key: long, h: 7, h2: 3}))
	s.remove(es[1])
	s.remove(es[3])
	assert.Nil(t, s.find(&refs[1]))
	assert.Nil(t, s.find(&refs[3]))
	for _, i := range []int{0, 2, 4} {
		assert.Same(t, es[i], s.find(&refs[i]), "find %d after removals", i)
	}
	assert.Equal(t, 3, s.n)
}

// TestEntryLayout pins down what the check of a cold value relies on: the
// whole state of a value, key included, is one 64-byte slot, and the
// table's array is 64-byte aligned, so a slot is one cache line.
func TestEntryLayout(t *testing.T) {
	var e keyState
	require.Equal(t, uintptr(64), unsafe.Sizeof(e))
	c := newCache(ruledef.MaxParamCapacity, modeReject)
	for i := 0; i < 20_000; i++ {
		touch(c, strconv.Itoa(i))
	}
	for i := range c.shards {
		s := &c.shards[i]
		if len(s.tab.slots) > 0 {
			assert.Zero(t, uintptr(unsafe.Pointer(&s.tab.slots[0]))%64, "table of %d slots aligned", len(s.tab.slots))
		}
	}
}

func TestEntryKeys(t *testing.T) {
	c := newCache(1000, modeReject)
	keys := []string{"", "a", strings.Repeat("x", maxKeyLen-1), strings.Repeat("x", maxKeyLen),
		strings.Repeat("x", maxKeyLen+1), strings.Repeat("y", maxKeyLen+1), strings.Repeat("x", 1000),
		strings.Repeat("x", 999) + "y", string(make([]byte, 16))}
	for i, k := range keys {
		buf := []byte(k) // the cache must copy what it keeps
		e := touch(c, string(buf))
		e.tokens = int64(i + 1)
		clear(buf)
	}
	for i, k := range keys {
		e, ok := c.lookup(k)
		require.True(t, ok, "lookup(%q)", k)
		assert.Equal(t, int64(i+1), e.tokens, "state of %q", k)
		_, r := c.locate(k)
		assert.True(t, e.is(&r))
		assert.Equal(t, len(k) > maxKeyLen, e.klen == fingerprinted, "%d bytes fingerprinted", len(k))
		assert.Equal(t, maphash.String(c.seed, k), e.h, "hash of %q", k)
		for _, other := range keys {
			if other != k {
				_, ro := c.locate(other)
				assert.False(t, e.is(&ro), "entry of %q is %q", k, other)
			}
		}
	}
	assert.Equal(t, len(keys), c.len())
}

// TestTableMatchesMap inserts and forgets values with hashes crowded into a
// few home slots (long runs, wrapping around the end, equal hashes), through
// the shard's get and remove and its rebuilds, and checks every lookup, and
// the queues, against a map; a pointer to a value's slot taken when it was
// inserted finds the value again (resolve) after any number of rebuilds,
// and nothing once it is forgotten.
func TestTableMatchesMap(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	c := newCache(1<<20, modeReject) // no eviction
	s := &c.shards[0]
	want := make(map[string]int64)
	hashes := make(map[string]uint64)
	first := make(map[string]*keyState) // the slot each value got first
	var live, gone []string
	rebuilds := 0
	for step := 0; step < 20_000; step++ {
		if len(live) > 0 && (rnd.IntN(2) == 0 || len(live) > 300) {
			i := rnd.IntN(len(live))
			k := live[i]
			live[i] = live[len(live)-1]
			live = live[:len(live)-1]
			e := s.find(&ref{key: k, h: hashes[k]})
			require.NotNil(t, e)
			s.remove(e)
			// The queues hold only live values: take k's number out as evict would.
			for _, q := range []*fifo{&s.small, &s.main} {
				for n := q.n; n > 0; n-- {
					j := q.pop()
					if &s.tab.slots[j] != e {
						q.push(j)
					}
				}
			}
			delete(want, k)
			gone = append(gone, k)
		} else {
			k := strconv.Itoa(step)
			// Hashes whose top bits name few slots, the last ones near the end.
			h := uint64(rnd.IntN(4))<<62 | uint64(rnd.IntN(3))<<58 | uint64(rnd.IntN(2))
			before := len(s.tab.slots)
			used := s.tab.used
			e := s.get(&ref{key: k, h: h}, int64(step), 0)
			if len(s.tab.slots) != before || s.tab.used != used+1 {
				rebuilds++
			}
			want[k], hashes[k] = int64(step), h
			first[k] = e
			live = append(live, k)
		}
		if step%97 == 0 || len(live) < 5 {
			n := 0
			for i := range s.tab.slots {
				if s.tab.slots[i].flags&slotLive != 0 {
					n++
				}
			}
			require.Equal(t, len(live), n, "step %d: values in the table", step)
			require.Equal(t, len(live), s.n)
			require.Equal(t, len(live), s.small.n+s.main.n, "step %d: values in the queues", step)
			for _, q := range []fifo{s.small, s.main} {
				for k := 0; k < q.n; k++ {
					require.NotZero(t, s.tab.slots[q.buf[(q.head+k)%len(q.buf)]].flags&slotLive, "step %d: queued slot live", step)
				}
			}
			for k, tok := range want {
				e := s.find(&ref{key: k, h: hashes[k]})
				require.NotNil(t, e, "step %d: find(%q)", step, k)
				require.Equal(t, tok, e.tokens, "step %d: state of %q", step, k)
				require.Same(t, e, s.resolve(first[k]), "step %d: resolve(%q)", step, k)
			}
			for _, k := range gone {
				require.Nil(t, s.resolve(first[k]), "step %d: resolve(forgotten %q)", step, k)
			}
			if len(live) > 0 {
				require.Nil(t, s.find(&ref{key: "absent", h: hashes[live[0]]}))
			}
		}
	}
	require.Greater(t, rebuilds, 10)
}
