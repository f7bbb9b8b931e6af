package notify

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestOrderAndReentrancy(t *testing.T) {
	var h Hub[int]
	var got []int
	depth, maxDepth := 0, 0
	h.Listen(func(v int) {
		depth++
		maxDepth = max(maxDepth, depth)
		got = append(got, v)
		if v < 3 {
			// Published from inside a listener: delivered after it returns.
			h.Publish(v*10 + 10)
			h.Publish(v*10 + 11)
		}
		depth--
	})
	h.Publish(1)
	assert.Equal(t, []int{1, 20, 21}, got)
	assert.Equal(t, 1, maxDepth, "never delivered while a listener runs")
}

func TestQueueUnderLockDeliverAfter(t *testing.T) {
	var h Hub[int]
	var mu sync.Mutex
	var got []int
	h.Listen(func(v int) {
		require.True(t, mu.TryLock(), "delivered outside the caller's lock")
		mu.Unlock()
		got = append(got, v)
	})
	mu.Lock()
	h.Enqueue(1)
	h.Enqueue(2)
	mu.Unlock()
	h.Drain()
	h.Drain()
	assert.Equal(t, []int{1, 2}, got)
}

func TestCancelAndNoListener(t *testing.T) {
	var h Hub[int]
	h.Publish(1) // dropped: nobody listens
	var a, b []int
	cancelA := h.Listen(func(v int) { a = append(a, v) })
	assert.True(t, h.Listening())
	h.Listen(func(v int) { b = append(b, v) })
	h.Listen(nil)() // ignored; its cancel does nothing
	h.Publish(2)
	cancelA()
	cancelA()
	h.Publish(3)
	assert.Equal(t, []int{2}, a)
	assert.Equal(t, []int{2, 3}, b)
}

func TestPanickingListener(t *testing.T) {
	var h Hub[int]
	var got []int
	h.Listen(func(v int) {
		got = append(got, v)
		if v == 1 {
			h.Enqueue(2)
			panic("boom")
		}
	})
	assert.PanicsWithValue(t, "boom", func() { h.Publish(1) })
	h.Drain() // the event queued before the panic
	h.Publish(3)
	assert.Equal(t, []int{1, 2, 3}, got)
}

func TestConcurrentPublishersEachEventOnce(t *testing.T) {
	var h Hub[int]
	var mu sync.Mutex
	seen := map[int]int{}
	last := map[int]int{} // per publisher, the last value seen: order per publisher
	h.Listen(func(v int) {
		mu.Lock()
		defer mu.Unlock()
		seen[v]++
		p, i := v/1000, v%1000
		if prev, ok := last[p]; ok {
			assert.Less(t, prev, i)
		}
		last[p] = i
	})
	var wg sync.WaitGroup
	for p := 0; p < 4; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				h.Publish(p*1000 + i)
			}
		}()
	}
	wg.Wait()
	h.Drain()
	assert.Len(t, seen, 2000)
	for v, n := range seen {
		assert.Equal(t, 1, n, "%d", v)
	}
}
