//go:build linux

package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"
	"golang.org/x/sys/unix"
)

// TestHashDoesNotEchoOnATerminal gives -hash a pseudo-terminal as standard
// input, types a password on it, and reads what the terminal showed: not
// the password.
func TestHashDoesNotEchoOnATerminal(t *testing.T) {
	// Non-blocking, so that reading it has a deadline.
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	master := os.NewFile(uintptr(fd), "/dev/ptmx")
	defer master.Close()
	require.NoError(t, unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	require.NoError(t, err)
	tty, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	require.NoError(t, err)
	defer tty.Close()

	const pw = "a secret typed here"
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- hashPassword(tty, &out) }()
	// Type once the terminal's echo is off (at most 5 s: a command that
	// never turns it off gets the password typed anyway, and echoes it).
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		tio, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
		require.NoError(t, err)
		if tio.Lflag&unix.ECHO == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	_, err = master.WriteString(pw + "\n")
	require.NoError(t, err)
	require.NoError(t, <-done)
	require.NoError(t, bcrypt.CompareHashAndPassword(bytes.TrimSpace(out.Bytes()), []byte(pw)))

	// What the terminal shows is in the master's buffer by now (echo is
	// done as the input is read).
	require.NoError(t, master.SetReadDeadline(time.Now().Add(100*time.Millisecond)))
	var shown []byte
	buf := make([]byte, 256)
	for {
		n, err := master.Read(buf)
		shown = append(shown, buf[:n]...)
		if err != nil {
			require.True(t, errors.Is(err, os.ErrDeadlineExceeded), "%v", err)
			break
		}
	}
	require.NotContains(t, string(shown), strings.Fields(pw)[1], "the terminal showed the password: %q", shown)
	tio, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	require.NoError(t, err)
	require.NotZero(t, tio.Lflag&unix.ECHO, "echo is on again")
}
