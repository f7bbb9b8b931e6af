package main

import "syscall"

// childAttr has the kernel kill a child (redis-server) when
// this process dies without stopping it.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
