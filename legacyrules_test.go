package sluice_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

var updateTraces = flag.Bool("update-traces", false, "write rules/testdata/flat/trace/* from this engine")

// TestPreviousReleaseRuleFilesDecideAsBefore loads each rule file of the
// release before the strategy sections (rules/testdata/flat, flat strategy
// fields) and replays a fixed schedule of entries on a manual clock: 200
// steps of 23 ms, each resource of the file entered once a step (param
// rules with two users and two tenants). The decisions (pass, or block
// with its RetryAfter) must equal those that release's engine recorded in
// rules/testdata/flat/trace (-update-traces, run there, wrote them): the
// flat fields mean what they meant, and so does each file rewritten in the
// sections' shape (rules/testdata/flat/sections). Files with cluster rules
// need a store and are left to the decoder's tests.
func TestPreviousReleaseRuleFilesDecideAsBefore(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("rules", "testdata", "flat", "*.*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no rule files: %v", err)
	}
	for _, f := range files {
		name := filepath.Base(f)
		if strings.Contains(name, "cluster") {
			continue
		}
		t.Run(name, func(t *testing.T) {
			golden := filepath.Join("rules", "testdata", "flat", "trace", name+".txt")
			for _, f := range []string{f, filepath.Join("rules", "testdata", "flat", "sections", name)} {
				s, err := rules.DecodeFile(f)
				if err != nil {
					t.Fatal(err)
				}
				got := decisionTrace(t, s)
				if *updateTraces {
					if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				want, err := os.ReadFile(golden)
				if err != nil {
					t.Fatal(err)
				}
				compareTraces(t, f, got, string(want))
			}
		})
	}
}

// compareTraces fails at the first step of trace got (of rule file f) that
// decides otherwise than want.
func compareTraces(t *testing.T, f, got, want string) {
	t.Helper()
	if got != want {
		g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
		for i := range min(len(g), len(w)) {
			if g[i] != w[i] {
				t.Fatalf("%s: step %d decides otherwise:\n got %s\nwant %s", f, i, g[i], w[i])
			}
		}
		t.Fatalf("%s: %d lines of trace, want %d", f, len(g), len(w))
	}
}

// decisionTrace replays the schedule on the rules of s, a line a step.
func decisionTrace(t *testing.T, s rules.Set) string {
	clk := sluicetest.NewManualClock(int64(time.Hour))
	g := sluice.New(sluice.WithClock(clk))
	defer g.Close()
	if err := g.LoadRules(s); err != nil {
		t.Fatal(err)
	}
	var res []string
	for _, r := range s.Flow {
		res = append(res, r.Resource)
	}
	for _, r := range s.Param {
		res = append(res, r.Resource)
	}
	slices.Sort(res)
	res = slices.Compact(res)
	done, cancel := context.WithCancel(context.Background())
	cancel() // throttling rules decide at once: pass on their turn, or refuse
	var b strings.Builder
	for i := range 200 {
		clk.Set(int64(time.Hour) + int64(i)*int64(23*time.Millisecond))
		fmt.Fprintf(&b, "%d", i)
		for _, r := range res {
			p, err := g.EntryContext(done, r, sluice.WithAttachment("user", i%2), sluice.WithAttachment("tenant", i%3/2),
				sluice.WithArgs("a", i%2))
			var be *core.BlockError
			if errors.As(err, &be) {
				fmt.Fprintf(&b, " %s=B%v/%s", r, be.RetryAfter, be.Reason)
				continue
			} else if err != nil {
				t.Fatal(err)
			}
			p.Exit()
			fmt.Fprintf(&b, " %s=P", r)
		}
		b.WriteByte('\n')
	}
	return b.String()
}
