//go:build !linux

package main

import "syscall"

// childAttr: outside Linux the run's deadline and its cleanup stop the
// children.
func childAttr() *syscall.SysProcAttr { return nil }
