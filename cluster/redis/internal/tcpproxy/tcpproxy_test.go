package tcpproxy

import (
	"bufio"
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo starts a loopback server that writes back every line it reads.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := bufio.NewReader(c)
				for {
					l, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(l)); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func start(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func dial(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

// roundTrip writes line and reads the answer, giving up after wait.
func roundTrip(c net.Conn, r *bufio.Reader, line string, wait time.Duration) (string, error) {
	_ = c.SetDeadline(time.Now().Add(wait))
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	got, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return got[:len(got)-1], nil
}

func TestForward(t *testing.T) {
	p := start(t, echo(t))
	c, r := dial(t, p)
	for _, give := range []string{"PING", "a longer line", ""} {
		got, err := roundTrip(c, r, give, 10*time.Second)
		if err != nil || got != give {
			t.Fatalf("roundTrip(%q) = %q, %v; want %q", give, got, err, give)
		}
	}
}

// TestDelay: with a delay far beyond the client's deadline no answer
// arrives in time; with the delay removed the next exchange on a new
// connection goes through.
func TestDelay(t *testing.T) {
	p := start(t, echo(t))
	p.SetDelay(time.Hour)
	c, r := dial(t, p)
	if got, err := roundTrip(c, r, "slow", 50*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("roundTrip through an hour's delay = %q, %v; want a deadline error", got, err)
	}
	p.SetDelay(0)
	c2, r2 := dial(t, p)
	if got, err := roundTrip(c2, r2, "fast", 10*time.Second); err != nil || got != "fast" {
		t.Fatalf("roundTrip without delay = %q, %v", got, err)
	}
}

// TestBlackhole: connections are accepted and written to, nothing comes
// back; after the blackhole new exchanges go through.
func TestBlackhole(t *testing.T) {
	p := start(t, echo(t))
	p.Blackhole(true)
	c, r := dial(t, p) // accepted
	if got, err := roundTrip(c, r, "lost", 50*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("roundTrip through the blackhole = %q, %v; want a deadline error", got, err)
	}
	p.Blackhole(false)
	c2, r2 := dial(t, p)
	if got, err := roundTrip(c2, r2, "back", 10*time.Second); err != nil || got != "back" {
		t.Fatalf("roundTrip after the blackhole = %q, %v", got, err)
	}
}

// TestCloseConns: open connections end (the client reads EOF), new ones
// are accepted.
func TestCloseConns(t *testing.T) {
	p := start(t, echo(t))
	c, r := dial(t, p)
	if _, err := roundTrip(c, r, "x", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	p.CloseConns()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.ReadString('\n'); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after CloseConns: %v, want the connection closed", err)
	}
	c2, r2 := dial(t, p)
	if got, err := roundTrip(c2, r2, "y", 10*time.Second); err != nil || got != "y" {
		t.Fatalf("roundTrip after CloseConns = %q, %v", got, err)
	}
}

// TestClose ends every goroutine even with reads held in a delay (goleak
// checks after the tests).
func TestClose(t *testing.T) {
	p := start(t, echo(t))
	p.SetDelay(time.Hour)
	c, _ := dial(t, p)
	if _, err := c.Write([]byte("held\n")); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Fatal("dial after Close succeeded")
	}
}
