package sluice

import (
	"errors"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/core"
	"github.com/sluice-go/sluice/rules"
)

// copyPass copies *p the way `cp := *p` does, without go vet seeing it.
func copyPass(p *Pass) *Pass {
	cp := new(Pass)
	reflect.ValueOf(cp).Elem().Set(reflect.ValueOf(p).Elem())
	return cp
}

// TestPassCopyReleasesOnce: under a concurrency limit of 1, exiting a Pass
// and a copy of it (in either order, and after the guard has gone to
// another pass) releases one slot, not two: the in-flight count never goes
// below zero, and two callers never hold the one slot.
func TestPassCopyReleasesOnce(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	_, err := loadFlow(g, []rules.Flow{{Metric: rules.Concurrency, Resource: "r", Threshold: 1}})
	require.NoError(t, err)
	inFlight := func() int64 {
		s, ok := g.Snapshot("r")
		require.True(t, ok)
		return s.Concurrency
	}
	holdsTheSlot := func(name string) {
		t.Helper()
		_, err := g.Entry("r")
		require.ErrorIs(t, err, core.ErrBlocked, "%s: a second caller got the one slot", name)
		require.Equal(t, int64(1), inFlight(), name)
	}

	for _, copyFirst := range []bool{false, true} {
		p, err := g.Entry("r")
		require.NoError(t, err)
		cp := copyPass(p)
		if copyFirst {
			cp.Exit()
			p.Exit()
		} else {
			p.Exit()
			cp.Exit()
		}
		require.Equal(t, int64(0), inFlight(), "copy first: %v", copyFirst)
		q, err := g.Entry("r")
		require.NoError(t, err)
		holdsTheSlot("after a pass and its copy exited")
		q.Exit()
	}

	// A stale copy exited after its guard went to a later pass (the guard
	// pool hands the same one back on this goroutine) releases nothing.
	p, err := g.Entry("r")
	require.NoError(t, err)
	cp := copyPass(p)
	p.Exit()
	q, err := g.Entry("r")
	require.NoError(t, err)
	cp.Exit()
	p.Exit()
	holdsTheSlot("a stale copy exited while another pass holds the slot")
	q.Exit()
	require.Equal(t, int64(0), inFlight())
}

// TestPassNilIsSafe: every method of Pass may be called on nil.
func TestPassNilIsSafe(t *testing.T) {
	var p *Pass
	require.NotPanics(t, func() {
		p.SetError(errors.New("x"))
		p.Exit()
	})
}

// TestPassCopyIsReportedByVet: go vet's copylocks check reports a copied
// Pass (testdata/copypass copies one).
func TestPassCopyIsReportedByVet(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go vet")
	}
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(goTool, "vet", "./testdata/copypass").CombinedOutput()
	require.Error(t, err, "go vet passed a copied Pass:\n%s", out)
	require.Contains(t, string(out), "assignment copies lock value to cp: github.com/sluice-go/sluice.Pass")
}
