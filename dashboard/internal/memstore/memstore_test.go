package memstore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-go/sluice/cluster"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeNow is a wall clock moved by hand.
type fakeNow struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeNow) now() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.t }
func (f *fakeNow) add(d time.Duration) {
	f.mu.Lock()
	f.t = f.t.Add(d)
	f.mu.Unlock()
}

func TestFramesKeptAndExpire(t *testing.T) {
	clk := &fakeNow{t: time.Unix(1_800_000_000, 0)}
	s := New(clk.now)
	ctx := context.Background()
	for sec := int64(0); sec < 10; sec++ {
		require.NoError(t, s.Publish(ctx, cluster.Frame{App: "shop", Instance: "i1", Second: sec}, 4, time.Minute))
	}
	require.NoError(t, s.Publish(ctx, cluster.Frame{App: "shop", Instance: "i0", Second: 8}, 4, 2*time.Minute))
	fs, err := s.Frames(ctx, "shop", 7)
	require.NoError(t, err)
	require.Len(t, fs, 4, "i1 kept 4 (6..9), of which 3 since 7; and i0's")
	require.Equal(t, "i0", fs[0].Instance, "by instance then second")
	require.Equal(t, []int64{7, 8, 9}, []int64{fs[1].Second, fs[2].Second, fs[3].Second})
	clk.add(time.Minute + time.Second)
	fs, err = s.Frames(ctx, "shop", 0)
	require.NoError(t, err)
	require.Len(t, fs, 1, "i1 forgotten a minute after its last frame")
	require.Equal(t, "i0", fs[0].Instance)
	require.Error(t, s.Publish(ctx, cluster.Frame{App: "shop"}, 1, time.Minute), "a frame names its instance")
}
