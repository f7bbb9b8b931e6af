package sluice

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

func TestNewResourceClonesName(t *testing.T) {
	src := []byte("GET /api/v1/items/{id}")
	r := newResource(string(src))
	for i := range src {
		src[i] = '!' // the caller's bytes may change; the name must not
	}
	require.Equal(t, "GET /api/v1/items/{id}", r.name)
}

func TestTableFindsEveryNameAndNothingElse(t *testing.T) {
	for _, n := range []int{0, 1, 7, 100, 5000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			var reg registry
			reg.init()
			all := map[string]*resource{}
			for i := 0; i < n; i++ {
				// Prefixes of one another, long and short, and the empty name.
				name := fmt.Sprintf("res-%d", i)
				switch i % 4 {
				case 1:
					name = strings.Repeat("p", i%97) // around shortName too
				case 2:
					name = strings.Repeat("long/", 10) + name
				}
				if _, dup := all[name]; dup {
					continue
				}
				all[name] = newResource(name)
			}
			tb := newTable(reg.seed, all)
			require.LessOrEqual(t, 2*len(all), len(tb.tags), "at most half full")
			require.Len(t, tb.res, len(tb.tags))
			for name, x := range all {
				require.Same(t, x, tb.get(name, 0), name)
				require.Equal(t, len(name) <= shortName, x.n != longName, "%q is held in the first line iff it is short", name)
			}
			for _, absent := range []string{"res--1", "nope", strings.Repeat("p", 98), strings.Repeat("long/", 10)} {
				if all[absent] == nil {
					require.Nil(t, tb.get(absent, 0), absent)
				}
			}
		})
	}
}

// TestRulesReachResourcesTrackedBeforeThem checks that the read table binds
// the rule set in force: on a resource created by traffic (before and after
// its promotion to the table), when rules appear, change and go away.
func TestRulesReachResourcesTrackedBeforeThem(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	g := New(WithClock(clk))
	defer g.Close()
	enter := func(name string) error {
		p, err := g.Entry(name)
		p.Exit()
		return err
	}
	names := make([]string, 50) // enough to promote the first ones
	for i := range names {
		names[i] = fmt.Sprintf("tracked-%d", i)
		require.NoError(t, enter(names[i]))
	}
	require.NotNil(t, g.reg.load(names[0], 0), "promoted by the misses that followed")
	for _, limit := range []float64{1, 3} {
		var rs []rules.Flow
		for _, n := range names {
			rs = append(rs, rules.Flow{Resource: n, Threshold: limit})
		}
		_, err := g.LoadFlowRules(rs)
		require.NoError(t, err)
		clk.Advance(time.Second)
		for _, n := range names {
			for i := 0; i < int(limit); i++ {
				require.NoError(t, enter(n), "%s pass %d at limit %v", n, i, limit)
			}
			require.ErrorIs(t, enter(n), ErrBlocked, "%s over limit %v", n, limit)
		}
	}
	_, err := g.LoadFlowRules(nil)
	require.NoError(t, err)
	for _, n := range names {
		for i := 0; i < 10; i++ {
			require.NoError(t, enter(n))
		}
	}
}

// TestLookupsRaceCreationAndReloads runs entries on new and old resources
// while rules are reloaded, under -race: every entry on a limited resource
// sees either the old or the new rule set, and nothing is lost.
func TestLookupsRaceCreationAndReloads(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	g := New(WithClock(clk))
	defer g.Close()
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				name := fmt.Sprintf("w%d-%d", w, i%100)
				p, err := g.Entry(name)
				if err == nil {
					p.Exit()
				} else {
					assert.ErrorIs(t, err, ErrBlocked)
				}
			}
		}()
	}
	for i := 0; i < 20; i++ {
		_, err := g.LoadFlowRules([]rules.Flow{{Resource: "w0-1", Threshold: float64(i + 1)}})
		require.NoError(t, err)
	}
	wg.Wait()
	require.Equal(t, 400, g.Resources())
	s, ok := g.Snapshot("w1-99")
	require.True(t, ok)
	require.Equal(t, uint64(5), s.TotalPass)
}
