//go:build unix

package main

import (
	"os"
	"path/filepath"
	"syscall"
)

// lockCache makes the checks that serve the tree through the module cache
// wait for each other on this host: two trees served at one version would
// otherwise share the cache's copy.
func lockCache() (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "sluice-modules.lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}
