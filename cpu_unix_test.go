//go:build unix

package sluice

import "syscall"

// processCPU returns the CPU time the process has used, user and system,
// in nanoseconds (0 where it cannot tell).
func processCPU() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
