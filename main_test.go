package sluice

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind (the
// system sampler, rule-file watchers, listener delivery).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
