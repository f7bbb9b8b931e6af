//go:build unix

package rules

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDecodeFileRefusesFIFO: a FIFO, or a symbolic link to one, is refused
// unopened with an error naming the path, instead of blocking for ever
// waiting for a writer. A directory is refused the same way.
func TestDecodeFileRefusesFIFO(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "rules.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("cannot make a FIFO here: %v", err)
	}
	link := filepath.Join(dir, "link.yaml")
	require.NoError(t, os.Symlink(fifo, link))
	sub := filepath.Join(dir, "dir.json")
	require.NoError(t, os.Mkdir(sub, 0o700))

	for _, path := range []string{fifo, link, sub} {
		done := make(chan error, 1)
		go func() { _, err := DecodeFile(path); done <- err }()
		var err error
		select {
		case err = <-done:
		case <-time.After(30 * time.Second):
			// The code under test is blocked in open: a writer that opens
			// and closes the FIFO lets it go, so no goroutine is left.
			w, werr := os.OpenFile(fifo, os.O_WRONLY, 0)
			if werr == nil {
				w.Close()
			}
			<-done
			t.Fatalf("DecodeFile(%s) blocked on a FIFO", path)
		}
		require.Error(t, err, path)
		require.EqualError(t, err, path+": rules: not a regular file (only a regular file, or a symbolic link to one, is read)")
		var pe *PathError
		require.True(t, errors.As(err, &pe), path)
		require.Equal(t, path, pe.Path)
	}
}
