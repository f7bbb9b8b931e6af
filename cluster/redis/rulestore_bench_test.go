package sluiceredis

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/cluster/redis/redistest"
)

// BenchmarkRuleStore measures the rule store's calls on a local Redis:
// Current (what every engine does each CheckInterval, serial and from
// parallel callers), Save (one script, plus the read of the base for the
// audit diff), Publish of a 50-resource frame, and Frames as a dashboard
// reads it every second: 3 instances × 300 kept frames of 50 resources.
func BenchmarkRuleStore(b *testing.B) {
	srv := redistest.Start(b)
	s := NewRuleStore(srv.Client(b), RuleStoreConfig{})
	ctx := context.Background()
	doc := "flow:\n"
	for i := 0; i < 50; i++ {
		doc += fmt.Sprintf("  - resource: r%d\n    threshold: %d\n", i, 10+i)
	}
	v, err := s.Save(ctx, "shop", 0, cluster.RuleVersion{Doc: []byte(doc), Author: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("current/serial", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := s.Current(ctx, "shop"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("current/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := s.Current(ctx, "shop"); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	base := v.Version // across the runs of the sub-benchmark
	b.Run("save", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			nv, err := s.Save(ctx, "shop", base, cluster.RuleVersion{Doc: []byte(doc), Author: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			base = nv.Version
		}
	})
	benchSaveWatch(b, s, NewRuleStore(srv.Client(b), RuleStoreConfig{}), doc, &base)
	tm := NewTelemetry(srv.Client(b), TelemetryConfig{})
	f := frame("shop", "i0", 0, 50)
	b.Run("publish", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			f.Second = int64(i)
			if err := tm.Publish(ctx, f, 300, time.Minute); err != nil {
				b.Fatal(err)
			}
		}
	})
	for inst := 0; inst < 3; inst++ {
		f := frame("shop", fmt.Sprint("i", inst), 0, 50)
		for sec := int64(0); sec < 300; sec++ {
			f.Second = 1000 + sec
			if err := tm.Publish(ctx, f, 300, time.Minute); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("frames/3x300x50", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			got, err := tm.Frames(ctx, "shop", 1000)
			if err != nil || len(got) != 900 {
				b.Fatalf("%d frames, %v", len(got), err)
			}
		}
	})
}

// benchSaveWatch measures save+watch: a Save by one client until another
// client's Watch reports the version, as cluster/sqlstore's benchmark of the
// same name does.
func benchSaveWatch(b *testing.B, s, watcher *RuleStore, doc string, base *int64) {
	ctx := context.Background()
	wctx, cancel := context.WithCancel(ctx)
	got := make(chan int64, 1024)
	done := make(chan error, 1)
	go func() { done <- watcher.Watch(wctx, "shop", func(v int64) { got <- v }) }()
	defer func() { cancel(); <-done }()
	save := func() {
		nv, err := s.Save(ctx, "shop", *base, cluster.RuleVersion{Doc: []byte(doc), Author: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		*base = nv.Version
	}
	<-got // changed(0): subscribed, every later save is announced
	b.Run("save+watch", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			save()
			for v := <-got; v < *base; v = <-got {
			}
		}
	})
}
