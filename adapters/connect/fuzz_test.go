package sluiceconnect_test

import (
	"bytes"
	"context"
	"net"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-go/sluice"
	sluiceconnect "github.com/sluice-go/sluice/adapters/connect"
	"github.com/sluice-go/sluice/rules"
)

// FuzzArgs feeds arbitrary header values, client addresses and request
// messages through a unary handler with the interceptor and param rules on
// each argument: nothing panics, and the arguments are what the handler
// sees (the header, the address's host, the message), nil for empty.
func FuzzArgs(f *testing.F) {
	f.Add("alice", "192.0.2.1:1234", "42")
	f.Add("", "[2001:db8::1]:80", "")
	f.Add(" ", "no-port", "é")
	f.Add("\xff", "", "\x00")
	f.Add("a\x00b", ":80", "..")
	f.Fuzz(func(t *testing.T, user, addr, value string) {
		const proc = "/sluice.test.Suite/X"
		g := sluice.New()
		defer g.Close()
		var ps []rules.Param
		for i := range 3 {
			ps = append(ps, rules.Param{Resource: proc, Index: i, Threshold: 1e9})
		}
		require.NoError(t, g.LoadRules(rules.Set{Param: ps}))
		var got, want [3]any
		extract := func(i int, f sluiceconnect.ArgFunc) sluiceconnect.ArgFunc {
			return func(ctx context.Context, c sluiceconnect.Call) any { got[i] = f(ctx, c); return got[i] }
		}
		message := func(_ context.Context, c sluiceconnect.Call) any {
			if m, ok := c.Msg.(*msg); ok && m.GetValue() != "" {
				return m.GetValue()
			}
			return nil
		}
		orNil := func(s string) any {
			if s == "" {
				return nil
			}
			return s
		}
		served := false
		h := connect.NewUnaryHandler(proc, func(_ context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
			served = true
			host, _, err := net.SplitHostPort(req.Peer().Addr)
			if err != nil {
				host = req.Peer().Addr
			}
			want = [3]any{orNil(req.Header().Get("X-User")), orNil(host), orNil(req.Msg.GetValue())}
			return connect.NewResponse(req.Msg), nil
		}, connect.WithInterceptors(sluiceconnect.NewInterceptor(g, sluiceconnect.WithArgs(
			extract(0, sluiceconnect.Header("x-user")), extract(1, sluiceconnect.PeerIP()), extract(2, message)))))
		// A protobuf string is UTF-8: Marshal refuses anything else.
		body, err := proto.Marshal(wrapperspb.String(strings.ToValidUTF8(value, "\uFFFD")))
		require.NoError(t, err)
		req := httptest.NewRequest("POST", proc, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/proto")
		req.Header["X-User"] = []string{user}
		req.RemoteAddr = addr
		h.ServeHTTP(httptest.NewRecorder(), req)
		if served {
			require.Equal(t, want, got)
			s, ok := g.Snapshot(proc)
			require.True(t, ok)
			require.Equal(t, uint64(1), s.TotalPass)
		}
	})
}
