//go:build unix

package sluicehttp_test

import (
	"syscall"
	"testing"
)

// processCPU returns the process's user and system CPU time in ns (0 when
// it cannot tell).
func processCPU() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// reportCPU reports the CPU time since from per operation, as cpu-ns/op:
// on a busy host the CPU a request costs, where ns/op is wall time.
func reportCPU(b *testing.B, from int64) {
	if to := processCPU(); from > 0 && to > from {
		b.ReportMetric(float64(to-from)/float64(b.N), "cpu-ns/op")
	}
}
