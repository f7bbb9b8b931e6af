package fleet_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/cluster/filestore"
	"github.com/sluice-go/sluice/fleet"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

// TestJoinLoad: Config.Load puts each version in force in place of the
// engine's LoadRules; a version it refuses is reported as refused, with
// its error, and the rules in force stay.
func TestJoinLoad(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	fs, err := filestore.Open(t.TempDir(), filestore.Config{Clock: clk, PollInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	save := func(base int64, doc string) {
		t.Helper()
		if _, err := fs.Save(ctx, "shop", base, cluster.RuleVersion{Doc: []byte(doc), Author: "ann"}); err != nil {
			t.Fatal(err)
		}
	}
	save(0, "flow:\n  - resource: api\n    threshold: 10\n")
	eng := sluice.New(sluice.WithClock(clk))
	defer eng.Close()
	errTooHigh := errors.New("threshold above 100")
	var loads int
	load := func(set rules.Set) error { // called by the follower, one at a time
		loads++
		for _, f := range set.Flow {
			if f.Threshold > 100 {
				return errTooHigh
			}
		}
		return eng.LoadRules(set)
	}
	m, err := fleet.Join(eng, fleet.Config{App: "shop", Instance: "i1", Rules: fs, Load: load})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if st := m.Status(); st.Version != 1 || eng.Rules().Flow[0].Threshold != 10 {
		t.Fatalf("after Join: %+v, rules %+v", st, eng.Rules())
	}
	blockUntil(t, clk, 2) // the store's poll and the follower's check
	save(1, "flow:\n  - resource: api\n    threshold: 1000\n")
	clk.Advance(time.Second)
	waitFor(t, "version 2 refused", func() bool { return m.Status().Refused == 2 })
	st := m.Status()
	if st.Version != 1 || !errors.Is(st.RefusedErr, errTooHigh) || eng.Rules().Flow[0].Threshold != 10 {
		t.Fatalf("after the refused version: %+v, rules %+v", st, eng.Rules())
	}
	waitFor(t, "the refusal reported", func() bool {
		rs, err := fs.Reports(ctx, "shop")
		return err == nil && len(rs) == 1 && rs[0].Refused == 2 && strings.Contains(rs[0].Err, "threshold above 100")
	})
	m.Close()
	if loads != 2 {
		t.Fatalf("Load called %d times, want 2", loads)
	}
}
