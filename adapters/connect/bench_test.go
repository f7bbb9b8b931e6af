package sluiceconnect_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-go/sluice"
	sluiceconnect "github.com/sluice-go/sluice/adapters/connect"
	"github.com/sluice-go/sluice/rules"
)

// discard is a reusable ResponseWriter, so the benchmarks measure the
// handler rather than a recorder's allocations.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

// BenchmarkInterceptor compares a unary connect handler served bare with
// the same handler behind the interceptor (one passing QPS rule), with and
// without a param rule on a header, and shows the engine's own Entry+Exit
// in the same run. The request is a connect-protocol POST served in
// process.
func BenchmarkInterceptor(b *testing.B) {
	const proc = "/sluice.test.Suite/X"
	g := sluice.New()
	b.Cleanup(func() { _ = g.Close() })
	err := g.LoadRules(rules.Set{
		Flow:  []rules.Flow{{Resource: proc, Threshold: 1e9}},
		Param: []rules.Param{{Resource: proc, Index: 0, Threshold: 1e9}},
	})
	if err != nil {
		b.Fatal(err)
	}
	h := func(_ context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
		return connect.NewResponse(req.Msg), nil
	}
	body, err := proto.Marshal(wrapperspb.String("x"))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("entry-exit-only", func(b *testing.B) {
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			p, err := g.EntryContext(ctx, proc, sluice.WithTraffic(sluice.Inbound))
			if err != nil {
				b.Fatal(err)
			}
			p.Exit()
		}
	})
	tests := []struct {
		name string
		h    http.Handler
	}{
		{"bare", connect.NewUnaryHandler(proc, h)},
		{"sluice", connect.NewUnaryHandler(proc, h, connect.WithInterceptors(sluiceconnect.NewInterceptor(g)))},
		{"sluice-args", connect.NewUnaryHandler(proc, h, connect.WithInterceptors(
			sluiceconnect.NewInterceptor(g, sluiceconnect.WithArgs(sluiceconnect.Header("X-User")))))},
	}
	for _, tt := range tests {
		b.Run(tt.name, func(b *testing.B) {
			req := httptest.NewRequest("POST", proc, nil)
			req.Header.Set("Content-Type", "application/proto")
			req.Header.Set("X-User", "alice")
			rd := bytes.NewReader(body)
			req.Body = io.NopCloser(rd)
			w := &discard{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				rd.Reset(body)
				clear(w.h)
				tt.h.ServeHTTP(w, req)
			}
		})
	}
}
