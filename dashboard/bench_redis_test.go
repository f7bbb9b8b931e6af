package dashboard

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-go/sluice/cluster"
	sluiceredis "github.com/sluice-go/sluice/cluster/redis"
	"github.com/sluice-go/sluice/cluster/redis/redistest"
	"github.com/sluice-go/sluice/stat"
)

// BenchmarkLiveRedis measures the app page's poll on a real Redis (3
// instances x 300 seconds x 50 resources): reading the frames alone, the
// whole window (the first poll), and the last 5 seconds (the next ones).
func BenchmarkLiveRedis(b *testing.B) {
	const instances, seconds, resources = 3, 300, 50
	now := time.Now()
	rdb := redistest.Start(b).Client(b)
	tel := sluiceredis.NewTelemetry(rdb, sluiceredis.TelemetryConfig{})
	rs := sluiceredis.NewRuleStore(rdb, sluiceredis.RuleStoreConfig{})
	ctx := context.Background()
	for i := 0; i < instances; i++ {
		for s := int64(0); s < seconds; s++ {
			f := cluster.Frame{App: "shop", Instance: fmt.Sprint("shop-", i), Second: now.Unix() - seconds + s, RuleVersion: 1}
			for r := 0; r < resources; r++ {
				rs := cluster.ResourceSecond{Resource: fmt.Sprint("GET /r", r), Second: stat.Second{Pass: 100, Block: 10, Complete: 100, AvgRT: time.Millisecond}}
				f.Resources = append(f.Resources, rs)
			}
			if err := tel.Publish(ctx, f, seconds, time.Hour); err != nil {
				b.Fatal(err)
			}
		}
	}
	d := &Dashboard{cfg: Config{Now: func() time.Time { return now }}, store: rs, tel: tel, window: seconds * time.Second}
	b.Run("frames", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := tel.Frames(ctx, "shop", now.Unix()-seconds); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("live", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			d.liveState(ctx, "shop", 0)
		}
	})
	b.Run("live-since", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			d.liveState(ctx, "shop", now.Unix()-5)
		}
	})
}
