package flow

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/rules"
)

// TestWarmUpReloadKeeps pins what a reloaded warm-up rule keeps, as
// Engine.LoadRules documents it: a rule that counts the same way (same
// resource, sections and StatInterval) keeps the window (reject)
// or the queue schedule (throttle) whatever else changed, and its warm-up
// tokens when the curve is the same: Threshold, ColdFactor (0 is 3),
// WarmUpPeriod. ID, MaxQueueing and Shadow do not touch the curve.
func TestWarmUpReloadKeeps(t *testing.T) {
	for _, b := range []behavior{behReject, behThrottle} {
		base := rules.Flow{Resource: "r", Threshold: 10, WarmUp: &rules.WarmUp{Period: 10 * time.Second}, Throttle: b.section(0)}
		for _, tt := range []struct {
			name       string
			change     func(r *rules.Flow)
			keepTokens bool
			keepQueue  bool // the window or the schedule
		}{
			{"nothing", func(r *rules.Flow) {}, true, true},
			{"ID", func(r *rules.Flow) { r.ID = "x" }, true, true},
			{"Shadow", func(r *rules.Flow) { r.Shadow = true }, true, true},
			{"ColdFactor 0 to 3", func(r *rules.Flow) { r.WarmUp = &rules.WarmUp{Period: r.WarmUp.Period, ColdFactor: 3} }, true, true},
			{"MaxQueueing", func(r *rules.Flow) { r.Throttle = b.section(time.Second) }, true, true},
			{"Threshold", func(r *rules.Flow) { r.Threshold = 20 }, false, true},
			{"ColdFactor", func(r *rules.Flow) { r.WarmUp = &rules.WarmUp{Period: r.WarmUp.Period, ColdFactor: 4} }, false, true},
			{"WarmUpPeriod", func(r *rules.Flow) { r.WarmUp = &rules.WarmUp{Period: 5 * time.Second} }, false, true},
			{"StatInterval", func(r *rules.Flow) { r.StatInterval = 500 * time.Millisecond }, false, false},
		} {
			if tt.name == "MaxQueueing" && b != behThrottle {
				continue // only throttle takes it
			}
			t.Run(string(b)+"/"+tt.name, func(t *testing.T) {
				nf := nodes(nil)
				old, err := Build([]rules.Flow{base}, nil, nf, nil)
				require.NoError(t, err)
				r := base
				tt.change(&r)
				cs, err := Build([]rules.Flow{r}, old, nf, nil)
				require.NoError(t, err)
				switch c := cs["r"][0].c.(type) {
				case *warmUp:
					o := old["r"][0].c.(*warmUp)
					assert.Equal(t, tt.keepTokens, c.tokens == o.tokens, "tokens")
					if tt.keepQueue {
						// (A new controller may claim the same window of
						// the resource: only keeping it is pinned.)
						assert.Same(t, o.win, c.win, "window")
					}
				case *warmUpThrottle:
					o := old["r"][0].c.(*warmUpThrottle)
					assert.Equal(t, tt.keepTokens, c.tokens == o.tokens, "tokens")
					assert.Equal(t, tt.keepQueue, c.sched == o.sched, "schedule")
				default:
					t.Fatalf("checker %T", c)
				}
			})
		}
	}
}
