package memstore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/rules"
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

func doc(threshold int) []byte {
	return []byte(fmt.Sprintf("flow:\n  - resource: r\n    threshold: %d\n", threshold))
}

func TestRules(t *testing.T) {
	clk := &fakeNow{t: time.Unix(1_800_000_000, 0)}
	var applied []int
	s := New(clk.now, func(app string, set rules.Set) error {
		applied = append(applied, int(set.Flow[0].Threshold))
		return nil
	})
	ctx := context.Background()
	cur, err := s.Current(ctx, "shop")
	require.NoError(t, err)
	require.Equal(t, cluster.RuleVersion{}, cur)

	v1, err := s.Save(ctx, "shop", 0, cluster.RuleVersion{Doc: doc(1), Author: "a"})
	require.NoError(t, err)
	require.Equal(t, int64(1), v1.Version)
	require.Equal(t, clk.now(), v1.At)
	_, err = s.Save(ctx, "shop", 0, cluster.RuleVersion{Doc: doc(2), Author: "b"})
	require.ErrorIs(t, err, cluster.ErrConflict)
	_, err = s.Save(ctx, "shop", 1, cluster.RuleVersion{Doc: []byte("flow:\n  - resource: r\n    threshold: -1\n"), Author: "b"})
	var re *rules.Error
	require.ErrorAs(t, err, &re)
	require.Equal(t, "Threshold", re.Field)
	_, err = s.Save(ctx, "shop", 1, cluster.RuleVersion{Doc: doc(1), Author: "b", RollbackOf: 1})
	require.NoError(t, err)
	require.Equal(t, []int{1, 1}, applied, "refused documents are not applied")

	apps, err := s.Apps(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"shop"}, apps)
	es, err := s.AuditLog(ctx, "shop", 10)
	require.NoError(t, err)
	require.Len(t, es, 2)
	require.Equal(t, "rollback", es[0].Action)
	require.Equal(t, "", es[0].Detail, "same document")
	require.Equal(t, "save", es[1].Action)
	require.Equal(t, "+ flow:\n+   - resource: r\n+     threshold: 1\n", es[1].Detail)

	// History and audit are bounded.
	for i := int64(2); i < 2+MaxHistory+5; i++ {
		_, err := s.Save(ctx, "shop", i, cluster.RuleVersion{Doc: doc(int(i)), Author: "a"})
		require.NoError(t, err)
	}
	h, err := s.History(ctx, "shop", 1000)
	require.NoError(t, err)
	require.Len(t, h, MaxHistory)
	require.Equal(t, int64(2+MaxHistory+5), h[0].Version)
	_, err = s.Version(ctx, "shop", 1)
	require.ErrorIs(t, err, cluster.ErrNoVersion)
	for i := 0; i < MaxAudit; i++ {
		require.NoError(t, s.Audit(ctx, cluster.AuditEntry{User: "u", Action: "login"}))
	}
	all, err := s.AuditLog(ctx, "", 2*MaxAudit)
	require.NoError(t, err)
	require.Len(t, all, MaxAudit)
}

func TestReportsAndFramesExpire(t *testing.T) {
	clk := &fakeNow{t: time.Unix(1_800_000_000, 0)}
	s := New(clk.now, nil)
	ctx := context.Background()
	require.NoError(t, s.Report(ctx, "shop", cluster.RuleReport{Instance: "i1", Version: 3}, time.Minute))
	for sec := int64(0); sec < 10; sec++ {
		require.NoError(t, s.Publish(ctx, cluster.Frame{App: "shop", Instance: "i1", Second: sec}, 4, time.Minute))
	}
	fs, err := s.Frames(ctx, "shop", 7)
	require.NoError(t, err)
	require.Len(t, fs, 3, "kept 4 (6..9), of which 3 since 7")
	rs, err := s.Reports(ctx, "shop")
	require.NoError(t, err)
	require.Len(t, rs, 1)
	clk.add(time.Minute + time.Second)
	fs, err = s.Frames(ctx, "shop", 0)
	require.NoError(t, err)
	require.Empty(t, fs)
	rs, err = s.Reports(ctx, "shop")
	require.NoError(t, err)
	require.Empty(t, rs)
	require.Error(t, s.Publish(ctx, cluster.Frame{App: "shop"}, 1, time.Minute), "a frame names its instance")
}

func TestWatch(t *testing.T) {
	s := New(nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan int64, 1)
	done := make(chan error, 1)
	go func() { done <- s.Watch(ctx, "shop", func(v int64) { got <- v }) }()
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.watchers["shop"]) == 1
	}, 5*time.Second, time.Millisecond)
	_, err := s.Save(context.Background(), "shop", 0, cluster.RuleVersion{Doc: doc(1), Author: "a"})
	require.NoError(t, err)
	require.Equal(t, int64(1), <-got)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
}
