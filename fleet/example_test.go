package fleet_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/cluster/filestore"
	"github.com/sluice-go/sluice/fleet"
)

// An instance of "shop" follows the rules saved in a rule store (here a
// directory; Redis in a fleet) and reports the version it runs.
func Example() {
	dir, err := os.MkdirTemp("", "fleet-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := filestore.Open(dir, filestore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	doc := []byte("flow:\n  - resource: GET /api\n    threshold: 100\n")
	if _, err := store.Save(context.Background(), "shop", 0, cluster.RuleVersion{Doc: doc, Author: "ann"}); err != nil {
		log.Fatal(err)
	}

	engine := sluice.New()
	defer engine.Close()
	member, err := fleet.Join(engine, fleet.Config{App: "shop", Instance: "shop-1", Rules: store})
	if err != nil {
		log.Fatal(err)
	}
	defer member.Close() // before the engine's Close

	st := member.Status()
	fmt.Printf("%s runs version %d of %s: %s at %v/s\n", st.Instance, st.Version, st.App,
		engine.Rules().Flow[0].Resource, engine.Rules().Flow[0].Threshold)
	// Output: shop-1 runs version 1 of shop: GET /api at 100/s
}
