package sluicetest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

// A cluster rule on the store in memory, on the engine's manual clock: the
// store's budget decides while it answers; once it fails, the rule's
// fallback does (here: refuse).
func ExampleNewStore() {
	clk := sluicetest.NewManualClock(0)
	store, fail := sluicetest.NewStore(clk)
	engine := sluice.New(sluice.WithClock(clk),
		sluice.WithCluster(store, sluice.ClusterConfig{App: "shop", InstanceID: "a"}))
	defer engine.Close()
	err := engine.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "pay", Threshold: 2,
		Cluster: &rules.Cluster{Strict: true, Fallback: rules.FallbackBlock}}}})
	if err != nil {
		panic(err)
	}
	try := func() string {
		p, err := engine.Entry("pay")
		if err != nil {
			return "refused"
		}
		p.Exit()
		return "served"
	}
	fmt.Println(try(), try(), try())

	fail(errors.New("connection refused"))
	clk.Advance(time.Second) // a new second: the budget would allow 2 again
	fmt.Println(try())
	status, _ := engine.ClusterStatus()
	fmt.Println("fallback", status.Fallback)
	// Output:
	// served served refused
	// refused
	// fallback true
}

// The rule store in memory passes the same conformance suite as the Redis
// and file stores (cluster/fleettest): versions based on the one edited,
// history, audit, watch.
func ExampleNewRuleStore() {
	store, _ := sluicetest.NewRuleStore(sluicetest.NewManualClock(0))
	ctx := context.Background()
	doc := []byte("flow:\n  - resource: GET /orders\n    threshold: 100\n")
	if _, err := store.Save(ctx, "shop", 0, cluster.RuleVersion{Doc: doc, Author: "ann"}); err != nil {
		panic(err)
	}
	_, err := store.Save(ctx, "shop", 0, cluster.RuleVersion{Doc: doc, Author: "bob"})
	fmt.Println(errors.Is(err, cluster.ErrConflict))
	_, err = store.Save(ctx, "shop", 1, cluster.RuleVersion{Doc: []byte("flow:\n  - resource: x\n    threshold: -1\n"), Author: "bob"})
	fmt.Println(errors.Is(err, cluster.ErrInvalidRules))
	log, _ := store.AuditLog(ctx, "shop", 10)
	fmt.Printf("%s %s v%d\n%s", log[0].User, log[0].Action, log[0].Version, log[0].Detail)
	// Output:
	// true
	// true
	// ann save v1
	// + flow:
	// +   - resource: GET /orders
	// +     threshold: 100
}
