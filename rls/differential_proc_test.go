package rls

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// buildSluiceRLS builds the command, so that the differential runs it as a
// process of its own and reads its CPU time.
func buildSluiceRLS(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sluice-rls")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/sluice-rls")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building sluice-rls: %v\n%s", err, out)
	}
	return bin
}

// startSluiceRLS runs the command with args on a loopback port until the
// test ends; it returns its address and process id.
func startSluiceRLS(t *testing.T, bin string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"-addr", "127.0.0.1:0", "-reload-interval", "-1s"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	log, err := os.CreateTemp(t.TempDir(), "sluice-rls-log")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		log.Close()
	})
	select {
	case line := <-lines:
		addr, ok := strings.CutPrefix(line, "listening on ")
		if !ok {
			t.Fatalf("sluice-rls printed %q", line)
		}
		return addr, cmd.Process.Pid
	case <-exited:
	case <-time.After(60 * time.Second):
	}
	out, _ := os.ReadFile(log.Name())
	t.Fatalf("sluice-rls did not start:\n%s", out)
	return "", 0
}

// processCPU is the CPU time (user and system, seconds) of process pid so
// far, from /proc/<pid>/stat (in clock ticks of 1/100 s, Linux's USER_HZ).
func processCPU(t *testing.T, pid int) float64 {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatalf("server CPU: %v (the speed table needs Linux's /proc)", err)
	}
	// The fields after the command's name, which is in parentheses.
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100
}
