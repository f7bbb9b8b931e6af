package sluiceredis

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// quiet drops go-redis's log lines (dial failures the restart test causes
// on purpose).
type quiet struct{}

func (quiet) Printf(context.Context, string, ...interface{}) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	// The test binary re-executed as one instance of a fleet
	// (TestProcessFleetSharesBudget) runs that instance and exits.
	if os.Getenv(envFleetChild) != "" {
		os.Exit(fleetChild())
	}
	if os.Getenv(envQuotaChild) != "" {
		os.Exit(quotaChild())
	}
	if os.Getenv(envConcChild) != "" {
		os.Exit(concChild())
	}
	if os.Getenv(envFaultChild) != "" {
		os.Exit(faultChild())
	}
	if os.Getenv(envBusyUntil) != "" {
		os.Exit(busyLoop())
	}
	if m := os.Getenv(envOrphanMode); m != "" {
		os.Exit(orphanMode(m))
	}
	goleak.VerifyTestMain(m)
}
