package rls

import (
	"testing"
	"time"

	"github.com/sluice-go/sluice/cluster/redis/redistest"
)

// BenchmarkDecideLeases: a decision of the Service in process, from leases
// of a local redis-server's windows (sluice-rls -redis).
func BenchmarkDecideLeases(b *testing.B) {
	srv := redistest.Start(b)
	m := newMetrics()
	lc := newLeaseCounters(srv.Client(b), RedisOptions{Timeout: time.Second, ExpectedInstances: 1}, m, 0, nil)
	s := newService(mustLoad(b, "testdata/integration"), Options{}, lc)
	s.metrics = m
	b.Cleanup(lc.close)
	benchDecide(b, s)
}
