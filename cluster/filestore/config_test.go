package filestore

import (
	"errors"
	"testing"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/rules"
)

// TestStoreConfigLimits: Config.Limits bounds what Save accepts, and the
// zero Config takes the defaults of rules.DecodeLimits (and dates with
// time.Now, Config.Now being nil).
func TestStoreConfigLimits(t *testing.T) {
	two := "flow:\n  - resource: a\n    threshold: 1\n  - resource: b\n    threshold: 1\n"
	s, err := Open(t.TempDir(), Config{Limits: rules.DecodeLimits{MaxRules: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Save(bg, "shop", 0, cluster.RuleVersion{Doc: []byte(two), Author: "ann"}); !errors.Is(err, cluster.ErrInvalidRules) {
		t.Fatalf("two rules under MaxRules 1: %v, want ErrInvalidRules", err)
	}
	d, err := Open(t.TempDir(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	v, err := d.Save(bg, "shop", 0, cluster.RuleVersion{Doc: []byte(two), Author: "ann"})
	if err != nil || v.Version != 1 || v.At.IsZero() {
		t.Fatalf("two rules under the defaults: %+v, %v", v, err)
	}
}
