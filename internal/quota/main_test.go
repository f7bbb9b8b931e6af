package quota

import (
	"testing"
	_ "time/tzdata" // the tests' zones, whatever the host has

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
