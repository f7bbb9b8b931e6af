package sluiceredis

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestRunLogger: twenty dial failures in two seconds write one line; the
// next failure after a quiet spell writes one more, saying how many were
// left out; another format is written at once.
func TestRunLogger(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1000, 0)
	r := newRunLogger(slog.New(slog.NewTextHandler(&buf, nil)), func() time.Time { return now })
	const dial = "redis: connection pool: failed to dial after %d attempts: %v"
	refused := errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
	for i := 0; i < 20; i++ {
		r.Printf(context.Background(), dial, 1, refused)
		now = now.Add(100 * time.Millisecond)
	}
	if n := strings.Count(buf.String(), "\n"); n != 1 {
		t.Fatalf("%d lines for 20 dial failures in 2 s, want 1:\n%s", n, buf.String())
	}
	if !strings.Contains(buf.String(), "connection refused") {
		t.Fatalf("line %q does not say why", buf.String())
	}
	r.Printf(context.Background(), "sentinel: new master=%q addr=%q", "m", "a:1")
	now = now.Add(runQuiet)
	r.Printf(context.Background(), dial, 1, refused)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], "new master") || !strings.Contains(lines[2], "left_out=19") {
		t.Fatalf("lines:\n%s", buf.String())
	}
	newRunLogger(nil, time.Now).Printf(context.Background(), dial, 1, refused) // discards
}
