package redistest

import "syscall"

// sysProcAttr has the kernel kill a server if the test binary dies without
// running its cleanups (a timeout panic, a SIGKILL).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
