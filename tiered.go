package sluice

import (
	"math"
	"strconv"

	"github.com/sluice-go/sluice/internal/flow"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/stat"
)

// Tiered limits (rules.Flow.Tiers): the rule's controller reads its metric
// at the first entry of each flow.TierEvery period and moves between steps;
// the engine gives it the process's CPU usage and hears of its moves, which
// it publishes as stat.EventTier. See docs/rollout.md.

// hookTiers connects the tiered rules among ctl (built from rs) to the
// engine, and starts the system metrics sampler when one of them reads the
// CPU.
func (eng *Engine) hookTiers(rs []rules.Flow, ctl map[string][]*flow.Controller) {
	cpu := false
	for i := range rs {
		cpu = cpu || (len(rs[i].Tiers) > 0 && rs[i].TierMetric == rules.TierCPU)
	}
	if cpu {
		eng.system.Start()
	}
	flow.SetTierHooks(ctl, flow.TierHooks{CPU: eng.cpuUsage, Changed: eng.tierEvent})
}

// cpuUsage is the sampler's last CPU usage, NaN when it has none or it is
// stale (system.StaleIntervals sample intervals old: system rules ignore it
// then too).
func (eng *Engine) cpuUsage() float64 {
	m := eng.system.Metrics()
	if m.CPUUsageAge < 0 || int64(m.CPUUsageAge) > eng.system.Stale() {
		return math.NaN()
	}
	return m.CPUUsage
}

func (eng *Engine) tierEvent(c flow.TierChange) {
	eng.events.Publish(stat.Event{
		Kind: stat.EventTier, At: c.At, Resource: c.Rule.Resource, Rule: c.Rule,
		From: strconv.Itoa(c.From), To: strconv.Itoa(c.To), Value: c.Value,
	})
}
