package sluice

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/window"
	"github.com/sluice-go/sluice/rules"
)

// rtSampleModel is the reference for the sample of exits a reader's RT
// figures come from (window.SampleFirst): per 100 ms bucket of the exit's
// instant, the first SampleFirst requests timed for themselves, then one
// in SampleEvery standing for SampleEvery up to request SampleWide, then
// one in SampleSparse standing for SampleSparse.
type rtSampleModel struct {
	counted       map[int64]int64
	estRT, trueRT int64 // µs
	exits         int64
}

func (m *rtSampleModel) exit(end, rt int64) {
	b := end / int64(window.BucketWidth)
	before := m.counted[b]
	m.counted[b] = before + 1
	us := rt / 1000
	m.trueRT += us
	m.exits++
	w := int64(1)
	if k := before + 1; k > window.SampleFirst { // the request's number in its bucket
		period := int64(window.SampleEvery)
		if k > window.SampleWide {
			period = window.SampleSparse
		}
		w = 0
		if k%period == 0 {
			w = period
		}
	}
	m.estRT += us * w
}

// TestReaderSamplesRT: on a manual clock, a resource that is read
// (Snapshot) and the inbound figures (SystemMetrics, counted under a
// shadow InboundQPS rule, which reads counts only) time a sample of
// their exits: counts exact, TotalRT the model's estimate to the
// microsecond, AvgRT within 5 % of the true mean over 20,000 exits. With a
// system rule that reads the inbound RT, every exit is timed: TotalRT
// exact, for the resource and inbound alike.
func TestReaderSamplesRT(t *testing.T) {
	for _, exact := range []bool{false, true} {
		t.Run(map[bool]string{false: "readers", true: "system-rule"}[exact], func(t *testing.T) {
			g, clk := newTestEngine(t, int64(time.Hour))
			mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 1e9})
			if exact {
				_, err := loadSystem(g, []rules.System{{Metric: rules.InboundAvgRT, Threshold: 1e6}})
				require.NoError(t, err)
			} else {
				watchInbound(t, g) // counted, on counts only: its RT is a sample
			}
			_, ok := g.Snapshot("r") // a reader
			require.True(t, ok)
			g.SystemMetrics()
			m := &rtSampleModel{counted: map[int64]int64{}}
			rng := rand.New(rand.NewPCG(3, 5))
			for i := 0; i < 20000; i++ {
				p, err := g.Entry("r")
				require.NoError(t, err)
				rt := time.Duration(20+rng.IntN(80)) * time.Microsecond
				clk.Advance(rt)
				p.Exit()
				m.exit(clk.Nanotime(), int64(rt))
			}
			s, _ := g.Snapshot("r")
			in := g.SystemMetrics().Inbound
			for _, s := range []struct {
				name string
				got  int64
			}{{"resource", int64(s.TotalRT / time.Microsecond)}, {"inbound", int64(in.TotalRT / time.Microsecond)}} {
				if exact {
					require.Equal(t, m.trueRT, s.got, s.name)
				} else {
					require.Equal(t, m.estRT, s.got, s.name+": the model's sample")
				}
			}
			require.Equal(t, uint64(m.exits), s.TotalComplete)
			require.Equal(t, uint64(m.exits), in.TotalComplete)
			require.InDelta(t, 1, float64(m.estRT)/float64(m.trueRT), 0.05)
			// AvgRT over the last second: the estimate over what exited in it.
			require.InDelta(t, 60e3, float64(s.AvgRT), 60e3*0.15)
		})
	}
}
