package dashboard

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/cluster/filestore"
	"github.com/sluice-go/sluice/dashboard/internal/memstore"
	"github.com/sluice-go/sluice/stat"
)

// BenchmarkLive measures what the app page costs the server each second it
// is open: reading a window of frames (3 instances, 300 seconds, 50
// resources a frame, from memory; the rules from a file store) and adding them up into the JSON the
// charts draw.
func BenchmarkLive(b *testing.B) {
	const instances, seconds, resources = 3, 300, 50
	now := time.Unix(1_800_000_000, 0)
	st := memstore.New(func() time.Time { return now })
	ctx := context.Background()
	for i := 0; i < instances; i++ {
		for s := int64(0); s < seconds; s++ {
			f := cluster.Frame{App: "shop", Instance: fmt.Sprint("shop-", i), Second: now.Unix() - seconds + s, RuleVersion: 1}
			for r := 0; r < resources; r++ {
				rs := cluster.ResourceSecond{Resource: fmt.Sprint("GET /r", r), Second: stat.Second{Pass: 100, Block: 10, Complete: 100, AvgRT: time.Millisecond}}
				rs.BlockedBy[1] = 10
				f.Resources = append(f.Resources, rs)
			}
			if err := st.Publish(ctx, f, seconds, time.Hour); err != nil {
				b.Fatal(err)
			}
		}
	}
	rs, err := filestore.Open(b.TempDir(), filestore.Config{})
	if err != nil {
		b.Fatal(err)
	}
	d := &Dashboard{cfg: Config{Now: func() time.Time { return now }}, store: rs, tel: st, window: seconds * time.Second}
	run := func(b *testing.B) {
		l := d.liveState(ctx, "shop", 0)
		if len(l.Resources) != defaultSeries || len(l.Resources[0].Points) != seconds {
			b.Fatalf("%d series of %d points", len(l.Resources), len(l.Resources[0].Points))
		}
		if err := newJSON(io.Discard).Encode(l); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			run(b)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				run(b)
			}
		})
	})
}
