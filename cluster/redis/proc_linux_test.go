package sluiceredis

import "syscall"

// childProcAttr has the kernel kill a child process when the test binary
// that started it dies without running its cleanups.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
