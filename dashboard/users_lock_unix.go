//go:build unix

package dashboard

import (
	"fmt"
	"os"
	"syscall"
)

// lockDir takes an exclusive flock on the directory dir, which serializes
// the writes of dashboard processes sharing a users file (a lock on the
// file itself would not survive its replacement by rename). It blocks
// until the lock is free; unlock releases it.
func lockDir(dir string) (unlock func(), err error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("dashboard: locking the users file's directory: %w", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("dashboard: locking the users file's directory: %w", err)
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
