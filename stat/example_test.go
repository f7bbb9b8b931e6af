package stat_test

import (
	"fmt"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
	"github.com/sluice-go/sluice/stat"
)

// An engine counts every resource it guards; Snapshot reads the counts of
// one as a stat.Snapshot.
func ExampleSnapshot() {
	engine := sluice.New(sluice.WithClock(sluicetest.NewManualClock(0)))
	defer engine.Close()
	if err := engine.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "upload", Threshold: 3}}}); err != nil {
		panic(err)
	}
	for i := 0; i < 5; i++ {
		if p, err := engine.Entry("upload"); err == nil {
			p.Exit()
		}
	}
	var s stat.Snapshot
	s, _ = engine.Snapshot("upload")
	fmt.Println("passed", s.TotalPass, "refused", s.TotalBlock, "by flow rules", s.BlockedBy[sluice.BlockFlow])
	// Output:
	// passed 3 refused 2 by flow rules 2
}
