// Package sluicetest helps test code that uses sluice, exactly and without
// Redis:
//
//   - NewEngine: an engine on a ManualClock, which moves only when the test
//     says so, closed when the test ends;
//   - NewStore: a cluster.Store in memory that counts as the Redis store
//     does, with a switch that makes it fail, to test cluster limits and
//     their fallback;
//   - NewRuleStore: a cluster.RuleStore in memory, for code that saves,
//     follows or shows versioned rules.
//
// For example:
//
//	func TestTenASecond(t *testing.T) {
//		engine, clk := sluicetest.NewEngine(t)
//		engine.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "r", Threshold: 10}}})
//		// ... 10 entries pass, the 11th is refused ...
//		clk.Advance(time.Second) // the next second: 10 more pass
//	}
package sluicetest
