package main

import "syscall"

// sysProcAttr has the kernel kill redis-server if the demo dies first.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
