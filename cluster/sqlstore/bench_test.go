package sqlstore

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/cluster/sqlstore/sqltest"
)

// BenchmarkRuleStore measures the store's calls on a local server of each
// kind, as cluster/redis's BenchmarkRuleStore does on Redis: Current (what
// every engine does each CheckInterval), Save of a 50-resource document
// (one transaction), and save+watch: a Save by one client until another
// client's Watch reports the version (MySQL's poll is 200 ms, so half of
// that on average; PostgreSQL's notification comes at once).
//
//	go test -run '^$' -bench BenchmarkRuleStore -benchtime 100x -count 5 ./cluster/sqlstore/
func BenchmarkRuleStore(b *testing.B) {
	for _, kind := range kinds {
		b.Run(kind, func(b *testing.B) {
			srv := sqltest.Shared(b, kind)
			s, url := openStore(b, srv, Config{})
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
			base := v.Version
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
			watcher, err := Open(ctx, url, Config{})
			if err != nil {
				b.Fatal(err)
			}
			defer watcher.Close()
			wctx, cancel := context.WithCancel(ctx)
			got := make(chan int64, 1024)
			done := make(chan error, 1)
			go func() { done <- watcher.Watch(wctx, "shop", func(v int64) { got <- v }) }()
			defer func() { cancel(); <-done }()
			<-got // changed(0): listening, every later save is announced
			b.Run("save+watch", func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					nv, err := s.Save(ctx, "shop", base, cluster.RuleVersion{Doc: []byte(doc), Author: "bench"})
					if err != nil {
						b.Fatal(err)
					}
					base = nv.Version
					for v := <-got; v < base; v = <-got {
					}
				}
			})
		})
	}
}
