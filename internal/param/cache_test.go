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
				require.NotNil(t, c.lookup("hot-"+strconv.Itoa(i)), "hot value %d evicted by the scan", i)
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
	require.Nil(t, c.lookup("a"))
	e := touch(c, "a")
	assert.True(t, e.inMain, "a value evicted recently comes back into the main queue")
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
	s.remove(es[1], 7)
	s.remove(es[3], 7)
	assert.Nil(t, s.find(&refs[1]))
	assert.Nil(t, s.find(&refs[3]))
	for _, i := range []int{0, 2, 4} {
		assert.Same(t, es[i], s.find(&refs[i]), "find %d after removals", i)
	}
	assert.Equal(t, 3, s.n)
}

// TestEntryLayout pins down what the check of a cold value relies on: an
// entry is one 128-byte size class (two aligned cache lines) and everything
// a check touches, up to the first bytes of the key, is in the first line.
func TestEntryLayout(t *testing.T) {
	var e keyState
	require.Equal(t, uintptr(128), unsafe.Sizeof(e))
	assert.LessOrEqual(t, unsafe.Offsetof(e.kbuf)+22, uintptr(64), "22 key bytes in the first line")
	for _, off := range []uintptr{unsafe.Offsetof(e.shard), unsafe.Offsetof(e.tokens), unsafe.Offsetof(e.part),
		unsafe.Offsetof(e.last), unsafe.Offsetof(e.inflight), unsafe.Offsetof(e.freq), unsafe.Offsetof(e.klen)} {
		assert.Less(t, off, uintptr(64))
	}
}

func TestEntryKeys(t *testing.T) {
	c := newCache(1000, modeReject)
	keys := []string{"", "a", strings.Repeat("x", maxKeyLen-1), strings.Repeat("x", maxKeyLen),
		strings.Repeat("x", maxKeyLen+1), strings.Repeat("y", maxKeyLen+1), strings.Repeat("x", 1000),
		strings.Repeat("x", 999) + "y", string(make([]byte, 16))}
	got := make(map[string]*keyState)
	for _, k := range keys {
		buf := []byte(k) // the cache must copy what it keeps
		e := touch(c, string(buf))
		clear(buf)
		got[k] = e
	}
	for _, k := range keys {
		e := c.lookup(k)
		require.Same(t, got[k], e, "lookup(%q)", k)
		_, r := c.locate(k)
		assert.True(t, e.is(&r))
		assert.Equal(t, len(k) > maxKeyLen, e.klen == fingerprinted, "%d bytes fingerprinted", len(k))
		assert.Equal(t, maphash.String(c.seed, k), e.hash(c.seed), "hash of %q", k)
		for _, other := range keys {
			if other != k {
				_, ro := c.locate(other)
				assert.False(t, e.is(&ro), "entry of %q is %q", k, other)
			}
		}
	}
	assert.Equal(t, len(keys), c.len())
}

// TestTableMatchesMap inserts and removes entries with hashes crowded into a
// few home slots (long runs, wrapping around the end, equal hashes) and
// checks every lookup against a map.
func TestTableMatchesMap(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	var tab table
	want := make(map[string]*keyState)
	hashes := make(map[string]uint64)
	var live []string
	for step := 0; step < 20_000; step++ {
		if len(live) > 0 && (rnd.IntN(2) == 0 || len(live) > 300) {
			i := rnd.IntN(len(live))
			k := live[i]
			live[i] = live[len(live)-1]
			live = live[:len(live)-1]
			tab.remove(hashes[k], want[k])
			delete(want, k)
		} else {
			k := strconv.Itoa(step)
			// Hashes whose top bits name few slots, the last ones near the end.
			h := uint64(rnd.IntN(4))<<62 | uint64(rnd.IntN(3))<<58 | uint64(rnd.IntN(2))
			e := &keyState{klen: uint8(len(k))}
			copy(e.kbuf[:], k)
			tab.insert(h, e, len(live)+1)
			want[k], hashes[k] = e, h
			live = append(live, k)
		}
		if step%97 == 0 || len(live) < 5 {
			n := 0
			for _, sl := range tab.slots {
				if sl.e != nil {
					n++
				}
			}
			require.Equal(t, len(live), n, "step %d: entries in the table", step)
			for k, e := range want {
				require.Same(t, e, tab.find(&ref{key: k, h: hashes[k]}), "step %d: find(%q)", step, k)
			}
			if len(live) > 0 {
				require.Nil(t, tab.find(&ref{key: "absent", h: hashes[live[0]]}))
			}
		}
	}
}
