package fleet

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind (a
// follower's, a publisher's).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
