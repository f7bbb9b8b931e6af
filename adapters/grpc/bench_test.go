package sluicegrpc_test

import (
	"context"
	"fmt"
	"io"
	"testing"

	"google.golang.org/grpc"

	"github.com/sluice-go/sluice"
	sluicegrpc "github.com/sluice-go/sluice/adapters/grpc"
	"github.com/sluice-go/sluice/rules"
)

// benchServerStream is a server stream that only has a context.
type benchServerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *benchServerStream) Context() context.Context { return s.ctx }

// benchClientStream is a client stream whose server has ended it: RecvMsg
// returns io.EOF.
type benchClientStream struct{ grpc.ClientStream }

func (benchClientStream) RecvMsg(any) error { return io.EOF }

// BenchmarkInterceptors compares a no-op handler (or invoker, or streamer)
// called bare with the same call through each interceptor (one passing QPS
// rule), and shows the engine's own Entry+Exit in the same run. The "args"
// cases add one argument extractor (a constant, so only the interceptor's
// own cost shows). A client stream is opened and read to its end.
func BenchmarkInterceptors(b *testing.B) {
	g := sluice.New()
	b.Cleanup(func() { _ = g.Close() })
	err := g.LoadRules(rules.Set{Flow: []rules.Flow{
		{Resource: unaryMethod, Threshold: 1e12},
		{Resource: bidiMethod, Threshold: 1e12},
	}})

	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	handler := func(ctx context.Context, req any) (any, error) { return req, nil }
	invoker := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		return nil
	}
	streamHandler := func(srv any, ss grpc.ServerStream) error { return nil }
	streamer := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		return benchClientStream{}, nil
	}
	info := &grpc.UnaryServerInfo{FullMethod: unaryMethod}
	sinfo := &grpc.StreamServerInfo{FullMethod: bidiMethod, IsClientStream: true, IsServerStream: true}
	ss := &benchServerStream{ctx: ctx}
	tenant := sluicegrpc.WithArgs(func(context.Context, string, any) any { return "acme" })
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
	for _, args := range []bool{false, true} {
		var opts []sluicegrpc.Option
		suffix := ""
		if args {
			opts, suffix = []sluicegrpc.Option{tenant}, "-args"
		}
		server := sluicegrpc.UnaryServerInterceptor(g, opts...)
		client := sluicegrpc.UnaryClientInterceptor(g, opts...)
		sserver := sluicegrpc.StreamServerInterceptor(g, opts...)
		sclient := sluicegrpc.StreamClientInterceptor(g, opts...)
		b.Run("server/sluice"+suffix, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = server(ctx, &req, info, handler)
			}
		})
		b.Run("client/sluice"+suffix, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = client(ctx, unaryMethod, &req, &reply, nil, invoker)
			}
		})
		b.Run("stream-server/sluice"+suffix, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = sserver(nil, ss, sinfo, streamHandler)
			}
		})
		b.Run("stream-client/sluice"+suffix, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				cs, err := sclient(ctx, bidiDesc, nil, bidiMethod, streamer)
				if err != nil {
					b.Fatal(err)
				}
				_ = cs.RecvMsg(&reply)
			}
		})
	}
	// A new stream first looks through the open streams of its resource
	// whose context can end, when there are at most 64 of them: here 64
	// (the most it looks through) and 1,000 (it does not look), none
	// cancelled.
	for _, n := range []int{64, 1000} {
		b.Run(fmt.Sprintf("stream-client/sluice-%d-open", n), func(b *testing.B) {
			sclient := sluicegrpc.StreamClientInterceptor(g)
			for range n {
				sctx, scancel := context.WithCancel(ctx)
				b.Cleanup(scancel)
				if _, err := sclient(sctx, bidiDesc, nil, bidiMethod, streamer); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				cs, err := sclient(ctx, bidiDesc, nil, bidiMethod, streamer)
				if err != nil {
					b.Fatal(err)
				}
				_ = cs.RecvMsg(&reply)
			}
		})
	}
	b.Run("client/bare", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = invoker(ctx, unaryMethod, &req, &reply, nil)
		}
	})
}
