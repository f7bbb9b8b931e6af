package sluicegrpc_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"sync/atomic"

	sluicegrpc "github.com/sluice-go/sluice/adapters/grpc"
	"github.com/sluice-go/sluice/rules"
)

// TestCircuitBreakerOpensAndRecovers drives a client-side breaker: an
// Unavailable server opens it, calls then fail fast without reaching the
// server, and after the retry timeout a successful probe closes it.
func TestCircuitBreakerOpensAndRecovers(t *testing.T) {
	f := start(t)
	err := f.cli.UpdateRules(func(s *rules.Set) {
		s.CircuitBreaker = []rules.CircuitBreaker{{
			Resource: unaryMethod, Strategy: rules.ErrorCount, Threshold: 2,
			MinRequestAmount: 1, RetryTimeout: 5 * time.Second,
		}}
	})

	require.NoError(t, err)
	var failing atomic.Bool
	served := new(atomic.Int64)
	f.svc.unary = func(_ context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		served.Add(1)
		if failing.Load() {
			return nil, status.Error(codes.Unavailable, "down")
		}
		return in, nil
	}
	clk := f.cliClk
	tests := []struct {
		name       string
		advance    time.Duration
		failing    bool
		want       codes.Code
		wantServed int64
	}{
		{"first failure", 0, true, codes.Unavailable, 1},
		{"second failure opens", 0, true, codes.Unavailable, 2},
		{"open: fails fast", 0, false, codes.Unavailable, 2},
		{"half-open: probe succeeds", 5 * time.Second, false, codes.OK, 3},
		{"closed again", 0, false, codes.OK, 4},
	}
	for _, tt := range tests {
		clk.Advance(tt.advance)
		failing.Store(tt.failing)
		_, err := f.call(t, context.Background(), "x")
		assert.Equal(t, tt.want, status.Code(err), "%s: %v", tt.name, err)
		assert.Equal(t, tt.wantServed, served.Load(), tt.name)
	}
}

// TestParamRuleOnMetadata limits each tenant separately on the server.
func TestParamRuleOnMetadata(t *testing.T) {
	f := start(t, sluicegrpc.WithArgs(sluicegrpc.Metadata("tenant")))
	err := f.srv.UpdateRules(func(s *rules.Set) { s.Param = []rules.Param{{Resource: unaryMethod, Threshold: 1}} })
	require.NoError(t, err)
	tests := []struct {
		tenant string
		want   codes.Code
	}{
		{"acme", codes.OK},
		{"acme", codes.ResourceExhausted},
		{"globex", codes.OK},
		{"", codes.OK}, // no tenant: not counted by the rule
		{"", codes.OK},
	}
	for _, tt := range tests {
		ctx := context.Background()
		if tt.tenant != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "tenant", tt.tenant)
		}
		_, err := f.call(t, ctx, "x")
		assert.Equal(t, tt.want, status.Code(err), "tenant %q: %v", tt.tenant, err)
	}
}
