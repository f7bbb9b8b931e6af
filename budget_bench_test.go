package sluice

import (
	"testing"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/rules"
)

// BenchmarkEntryExitBudget is BenchmarkEntryExit/serial with and without
// WithBudget, on the Gate's path (one QPS reject rule) and on the rule
// set's (a reject rule and a token bucket): what asking for the remaining
// budget costs, and that the pass path without it costs what it did
// (docs/design/benchmarks.md, "Remaining budget").
func BenchmarkEntryExitBudget(b *testing.B) {
	for _, tt := range []struct {
		name  string
		rules []rules.Flow
	}{
		{"one-rule", []rules.Flow{{Resource: "r", Threshold: 1e12}}},
		{"reject+bucket", []rules.Flow{{Resource: "r", Threshold: 1e12}, {Resource: "r", Threshold: 1e12, Bucket: &rules.Bucket{}}}},
	} {
		for _, on := range []bool{false, true} {
			name := tt.name + "/off"
			if on {
				name = tt.name + "/on"
			}
			b.Run(name, func(b *testing.B) {
				g := New()
				b.Cleanup(func() { _ = g.Close() })
				if _, err := loadFlow(g, tt.rules); err != nil {
					b.Fatal(err)
				}
				var bg core.Budget
				opts := []EntryOption(nil)
				if on {
					opts = []EntryOption{WithBudget(&bg)}
				}
				b.ReportAllocs()
				b.ResetTimer()
				cpu := processCPU()
				for i := 0; i < b.N; i++ {
					p, err := g.Entry("r", opts...)
					if err != nil {
						b.Fatal(err)
					}
					p.Exit()
				}
				reportCPU(b, cpu)
			})
		}
	}
}
