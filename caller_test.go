package sluice

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/slots"
)

// TestWithCallerRefusesBadIdentity: a caller too long, not UTF-8 or holding
// a control character is refused with ErrBadCaller naming the problem, and
// nothing is counted (neither passed nor blocked, no resource made).
func TestWithCallerRefusesBadIdentity(t *testing.T) {
	for _, tc := range []struct {
		name, caller, says string
	}{
		{"1 MiB", strings.Repeat("a", 1<<20), "1048576 bytes, more than 256"},
		{"257 bytes", strings.Repeat("é", 128) + "a", "257 bytes, more than 256"},
		{"invalid UTF-8", "svc-\xff\xfe", "not valid UTF-8 at byte 4"},
		{"truncated rune", "svc-\xc3", "not valid UTF-8 at byte 4"},
		{"newline", "svc\nX-Admin: 1", "control character 0xa at byte 3"},
		{"NUL", "svc\x00", "control character 0x0 at byte 3"},
		{"DEL", "svc\x7f", "control character 0x7f at byte 3"},
		{"C1 control", "svc\u0085", "control character U+0085 at byte 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, _ := newTestEngine(t, 0)
			mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 1})
			p, err := g.Entry("r", WithCaller(tc.caller))
			require.ErrorIs(t, err, ErrBadCaller)
			require.Contains(t, err.Error(), tc.says)
			require.Zero(t, p)
			s, _ := g.Snapshot("r")
			require.Zero(t, s.PassQPS+s.BlockQPS, "an invalid caller counts nothing")
			// The rule's one request per second is still there to take.
			p, err = g.Entry("r", WithCaller("ok"))
			require.NoError(t, err)
			p.Exit()
			_, err = g.Entry("fresh", WithCaller(tc.caller))
			require.True(t, errors.Is(err, ErrBadCaller))
			_, tracked := g.Snapshot("fresh")
			require.False(t, tracked, "an invalid caller makes no resource")
		})
	}
}

// TestWithCallerAccepts: the longest caller, non-ASCII letters, and the
// empty caller (no caller) pass; custom slots see the caller.
func TestWithCallerAccepts(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	for _, c := range []string{"", "a", strings.Repeat("x", 256), strings.Repeat("é", 128), "spiffe://example.org/ns/pay/sa/api", "支付"} {
		p, err := g.Entry("r", WithCaller(c))
		require.NoError(t, err, "%q", c)
		p.Exit()
	}
}

func TestWithCallerAllocs(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 1e12})
	n := testing.AllocsPerRun(100, func() {
		p, err := g.Entry("r", WithCaller("orders-service"))
		if err != nil {
			t.Fatal(err)
		}
		p.Exit()
	})
	require.Zero(t, n)
}

type callerSeen struct{ got []string }

func (s *callerSeen) Check(e *slots.Entry) *core.BlockError {
	s.got = append(s.got, e.Caller)
	return nil
}

// TestWithCallerCustomSlot: custom slots see the entry's caller.
func TestWithCallerCustomSlot(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	s := &callerSeen{}
	require.NoError(t, g.RegisterSlot(s, 0))
	for _, c := range []string{"a", "", "b"} {
		p, err := g.Entry("r", WithCaller(c))
		require.NoError(t, err)
		p.Exit()
	}
	require.Equal(t, []string{"a", "", "b"}, s.got)
}
