// Command connect shows sluiceconnect limiting a connect service (its
// messages are well-known types, so no generated code is needed): a flow
// rule on the handler admits 3 calls per second to the procedure, whatever
// the request; the rest fail with resource_exhausted and a retry delay. It
// serves on 127.0.0.1 (HTTP/1.1, the connect protocol), calls itself,
// prints what happened and exits.
//
//	go run ./adapters/connect/example                                    # in the repository
//	go run github.com/sluice-go/sluice/adapters/connect/example@latest  # anywhere
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-go/sluice"
	sluiceconnect "github.com/sluice-go/sluice/adapters/connect"
	"github.com/sluice-go/sluice/rules"
)

const greet = "/example.v1.Greeter/Greet"

func main() {
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// run writes what happened to w. opts are the engine's options (the test
// gives it a manual clock, so that a slow host cannot start a new second
// between the calls).
func run(w io.Writer, opts ...sluice.Option) error {
	engine := sluice.New(opts...)
	defer engine.Close()
	if err := engine.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: greet, Threshold: 3}}}); err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.Handle(greet, connect.NewUnaryHandler(greet,
		func(_ context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			return connect.NewResponse(wrapperspb.String("hello " + req.Msg.GetValue())), nil
		},
		connect.WithInterceptors(sluiceconnect.NewInterceptor(engine)),
	))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()

	hc := &http.Client{Timeout: 5 * time.Second}
	client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](hc, "http://"+lis.Addr().String()+greet)
	admitted := 0
	for i := 1; i <= 6; i++ {
		name := fmt.Sprintf("caller-%d", i)
		resp, err := client.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String(name)))
		if err != nil {
			line := fmt.Sprintf("Greet(%s) -> %s", name, connect.CodeOf(err))
			var ce *connect.Error
			if errors.As(err, &ce) {
				for _, d := range ce.Details() {
					if v, derr := d.Value(); derr == nil {
						if ri, ok := v.(*errdetails.RetryInfo); ok {
							line += fmt.Sprintf(" (retry in %s)", ri.GetRetryDelay().AsDuration())
						}
					}
				}
			}
			fmt.Fprintln(w, line)
			continue
		}
		admitted++
		fmt.Fprintf(w, "Greet(%s) -> %s\n", name, resp.Msg.GetValue())
	}
	if s, ok := engine.Snapshot(greet); ok {
		fmt.Fprintf(w, "resource %q: %d passed, %d blocked\n", greet, s.TotalPass, s.TotalBlock)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		return err
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	if admitted != 3 {
		return fmt.Errorf("expected 3 admitted calls, got %d", admitted)
	}
	return nil
}
