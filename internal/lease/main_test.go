package lease

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind: the
// Manager's store goroutine, the deadline goroutines of Store calls on a
// manual clock, heartbeats.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
