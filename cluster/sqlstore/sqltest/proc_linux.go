package sqltest

import "syscall"

// sysProcAttr runs a server as cred (nil: as the test), in a process group
// of its own, killed by the kernel if the test binary dies first.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true, Credential: cred}
}
