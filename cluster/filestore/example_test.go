package filestore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/cluster/filestore"
)

// A Store keeps versioned rules in a directory: each save is checked whole,
// based on the version the editor saw, and the rules in force are also a
// plain rule file.
func Example() {
	dir, err := os.MkdirTemp("", "rules")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	store, err := filestore.Open(dir, filestore.Config{})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	doc := []byte("flow:\n  - resource: GET /orders\n    threshold: 100\n")
	v, err := store.Save(ctx, "shop", 0, cluster.RuleVersion{Doc: doc, Author: "ann", Comment: "first limits"})
	if err != nil {
		panic(err)
	}
	fmt.Println("version", v.Version)
	if _, err := store.Save(ctx, "shop", 0, cluster.RuleVersion{Doc: doc, Author: "bob"}); err == cluster.ErrConflict {
		fmt.Println("bob edited version 0: conflict")
	}
	file, _ := os.ReadFile(store.RuleFile("shop"))
	fmt.Println(filepath.Base(store.RuleFile("shop")), string(file) == string(doc))
	// Output:
	// version 1
	// bob edited version 0: conflict
	// rules.yaml true
}
