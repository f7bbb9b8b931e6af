// Command grpc shows sluicegrpc limiting a gRPC service (the standard health
// service, so no generated code is needed):
//
//   - a flow rule admits 2 unary Check calls per second on the server; the
//     rest fail with codes.ResourceExhausted;
//   - a concurrency rule on the client admits one Watch stream at a time: a
//     second stream is refused while the first is open (codes.Unavailable,
//     as a full concurrency limit is overload), and admitted once the first
//     has ended.
//
// It serves on 127.0.0.1, calls itself, prints what happened and exits.
//
//	go run ./adapters/grpc/example                                    # in the repository
//	go run github.com/sluice-go/sluice/adapters/grpc/example@latest  # anywhere
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice"
	sluicegrpc "github.com/sluice-go/sluice/adapters/grpc"
	"github.com/sluice-go/sluice/rules"
)

const (
	checkMethod = "/grpc.health.v1.Health/Check"
	watchMethod = "/grpc.health.v1.Health/Watch"
)

func main() {
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// run writes what happened to w. opts are the engines' options (the test
// gives them a manual clock, so that a slow host cannot start a new second
// between the requests).
func run(w io.Writer, opts ...sluice.Option) error {
	// Separate engines for the two sides, as two processes would have.
	server, client := sluice.New(opts...), sluice.New(opts...)
	defer server.Close()
	defer client.Close()
	if err := server.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: checkMethod, Threshold: 2}}}); err != nil {
		return err
	}
	if err := client.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: watchMethod, Metric: rules.Concurrency, Threshold: 1}}}); err != nil {
		return err
	}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := grpc.NewServer(
		grpc.UnaryInterceptor(sluicegrpc.UnaryServerInterceptor(server)),
		grpc.StreamInterceptor(sluicegrpc.StreamServerInterceptor(server)),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() {
		srv.Stop()
		<-served
	}()

	conn, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(sluicegrpc.UnaryClientInterceptor(client)),
		grpc.WithStreamInterceptor(sluicegrpc.StreamClientInterceptor(client)),
	)
	if err != nil {
		return err
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	ctx := context.Background()

	fmt.Fprintln(w, "unary, 2 per second on the server:")
	for i := 1; i <= 4; i++ {
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			fmt.Fprintf(w, "  Check #%d -> %s\n", i, status.Code(err))
			continue
		}
		fmt.Fprintf(w, "  Check #%d -> %s\n", i, resp.GetStatus())
	}

	fmt.Fprintln(w, "streams, 1 at a time on the client:")
	wctx, cancel := context.WithCancel(ctx)
	first, err := hc.Watch(wctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		cancel()
		return err
	}
	if _, err := first.Recv(); err != nil {
		cancel()
		return err
	}
	fmt.Fprintln(w, "  Watch #1 -> open")
	_, err = hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	fmt.Fprintf(w, "  Watch #2 while #1 is open -> %s\n", status.Code(err))
	cancel() // ends the first stream, and its entry
	_, err = first.Recv()
	fmt.Fprintf(w, "  Watch #1 ended -> %s\n", status.Code(err))
	tctx, tcancel := context.WithCancel(ctx)
	defer tcancel()
	third, err := hc.Watch(tctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return fmt.Errorf("third stream refused: %w", err)
	}
	if _, err := third.Recv(); err != nil {
		return err
	}
	fmt.Fprintln(w, "  Watch #3 after #1 ended -> open")

	s, _ := server.Snapshot(checkMethod)
	c, _ := client.Snapshot(watchMethod)
	fmt.Fprintf(w, "server %s: %d passed, %d blocked; client %s: %d passed, %d blocked\n",
		checkMethod, s.TotalPass, s.TotalBlock, watchMethod, c.TotalPass, c.TotalBlock)
	if s.TotalPass != 2 || c.TotalBlock != 1 {
		return fmt.Errorf("unexpected counts: %+v %+v", s, c)
	}
	return nil
}
