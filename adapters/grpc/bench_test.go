package sluicegrpc_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"

	"github.com/sluice-go/sluice"
	sluicegrpc "github.com/sluice-go/sluice/adapters/grpc"
	"github.com/sluice-go/sluice/rules"
)

// BenchmarkInterceptors compares a no-op handler (or invoker) called bare
// with the same call through each unary interceptor (one passing QPS rule),
// and shows the engine's own Entry+Exit in the same run.
func BenchmarkInterceptors(b *testing.B) {
	g := sluice.New()
	b.Cleanup(func() { _ = g.Close() })
	_, err := g.LoadFlowRules([]rules.Flow{{Resource: unaryMethod, Threshold: 1e12}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	handler := func(ctx context.Context, req any) (any, error) { return req, nil }
	invoker := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		return nil
	}
	info := &grpc.UnaryServerInfo{FullMethod: unaryMethod}
	server := sluicegrpc.UnaryServerInterceptor(g)
	client := sluicegrpc.UnaryClientInterceptor(g)
	var req, reply struct{}

	b.Run("entry-exit-only", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p, err := g.EntryContext(ctx, unaryMethod, sluice.WithTraffic(sluice.Inbound))
			if err != nil {
				b.Fatal(err)
			}
			p.Exit()
		}
	})
	b.Run("server/bare", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = handler(ctx, &req)
		}
	})
	b.Run("server/sluice", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = server(ctx, &req, info, handler)
		}
	})
	b.Run("client/bare", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = invoker(ctx, unaryMethod, &req, &reply, nil)
		}
	})
	b.Run("client/sluice", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = client(ctx, unaryMethod, &req, &reply, nil, invoker)
		}
	})
}
