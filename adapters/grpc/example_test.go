package sluicegrpc_test

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice"
	sluicegrpc "github.com/sluice-go/sluice/adapters/grpc"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

// The server interceptor enters each call under its full method name and
// answers a refusal with a status (ResourceExhausted for a rate limit). A
// server installs it with grpc.ChainUnaryInterceptor; here it is called
// directly, as the server would.
func ExampleUnaryServerInterceptor() {
	engine := sluice.New(sluice.WithClock(sluicetest.NewManualClock(0)))
	defer engine.Close()
	if err := engine.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "/shop.Orders/Get", Threshold: 2}}}); err != nil {
		panic(err)
	}
	intercept := sluicegrpc.UnaryServerInterceptor(engine)
	_ = grpc.NewServer(grpc.ChainUnaryInterceptor(intercept)) // how a server uses it

	info := &grpc.UnaryServerInfo{FullMethod: "/shop.Orders/Get"}
	handler := func(ctx context.Context, req any) (any, error) { return "order", nil }
	for i := 0; i < 3; i++ {
		_, err := intercept(context.Background(), nil, info, handler)
		fmt.Println(status.Code(err))
	}
	// Output:
	// OK
	// OK
	// ResourceExhausted
}
