package sluice

import "testing"

// BenchmarkEntryExitCaller is BenchmarkEntryExit's serial and parallel
// cases with and without a caller (0 allocs/op either way). Run it beside
// BenchmarkEntryExit in the same run to compare:
//
//	go test -run '^$' -bench 'BenchmarkEntryExit$|BenchmarkEntryExitCaller' -count 6 .
func BenchmarkEntryExitCaller(b *testing.B) {
	for _, c := range []struct {
		name string
		opts []EntryOption
	}{
		{"none", nil},
		{"caller", []EntryOption{WithCaller("orders-service")}},
	} {
		b.Run(c.name+"/serial", func(b *testing.B) {
			g := benchEngine(b, "r")
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p, err := g.Entry("r", c.opts...)
				if err != nil {
					b.Fatal(err)
				}
				p.Exit()
			}
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			g := benchEngine(b, "r")
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					p, err := g.Entry("r", c.opts...)
					if err != nil {
						b.Fatal(err)
					}
					p.Exit()
				}
			})
		})
	}
}
