package sluicegrpc_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sync/atomic"

	"github.com/sluice-go/sluice"
	sluicegrpc "github.com/sluice-go/sluice/adapters/grpc"
	"github.com/sluice-go/sluice/slots"
)

// refuser is a custom rule-check slot that refuses every entry with a copy
// of the block error it holds, or admits it when it holds none: it makes
// any block type the engine can return, with any rule, numbers and wait.
type refuser struct {
	be atomic.Pointer[sluice.BlockError]
}

func (r *refuser) Check(*slots.Entry) *sluice.BlockError {
	if be := r.be.Load(); be != nil {
		c := *be
		return &c
	}
	return nil
}

// refusalDetails returns the RetryInfo delay of st (0 without one) and its
// ErrorInfo (nil without one); it fails on any other detail.
func refusalDetails(t *testing.T, st *status.Status) (time.Duration, *errdetails.ErrorInfo) {
	t.Helper()
	var (
		delay time.Duration
		info  *errdetails.ErrorInfo
	)
	for _, d := range st.Details() {
		switch x := d.(type) {
		case *errdetails.RetryInfo:
			delay = x.GetRetryDelay().AsDuration()
		case *errdetails.ErrorInfo:
			info = x
		default:
			t.Fatalf("unexpected detail %T: %v", d, d)
		}
	}
	return delay, info
}

// TestRefusalStatuses refuses a unary call on a real server with each
// block type: rate limits end with ResourceExhausted, overload with
// Unavailable, each with one message per block type and the RetryInfo the
// policy gives; ErrorInfo only when the policy opts in.
func TestRefusalStatuses(t *testing.T) {
	qps := sluice.RuleRef{ID: "checkout-qps", Metric: "qps"}
	conc := sluice.RuleRef{Metric: "concurrency"}
	tests := []struct {
		name      string
		be        sluice.BlockError
		policy    *sluicegrpc.RefusalPolicy // nil: the default
		wantCode  codes.Code
		wantDelay time.Duration // 0: no RetryInfo
	}{
		{"flow QPS", sluice.BlockError{Type: sluice.BlockFlow, Rule: qps, Observed: 10, Threshold: 10, RetryAfter: 300 * time.Millisecond}, nil, codes.ResourceExhausted, 300 * time.Millisecond},
		{"flow QPS, no wait", sluice.BlockError{Type: sluice.BlockFlow, Rule: qps}, nil, codes.ResourceExhausted, 0},
		{"flow QPS fast check (no rule)", sluice.BlockError{Type: sluice.BlockFlow, RetryAfter: time.Second}, nil, codes.ResourceExhausted, time.Second},
		{"flow concurrency", sluice.BlockError{Type: sluice.BlockFlow, Rule: conc}, nil, codes.Unavailable, time.Second},
		{"param", sluice.BlockError{Type: sluice.BlockParam, Rule: sluice.RuleRef{Metric: "qps"}, RetryAfter: 250 * time.Millisecond}, nil, codes.ResourceExhausted, 250 * time.Millisecond},
		{"param, no wait", sluice.BlockError{Type: sluice.BlockParam, Rule: sluice.RuleRef{Metric: "concurrency"}}, nil, codes.ResourceExhausted, 0},
		{"isolation", sluice.BlockError{Type: sluice.BlockFlow, Rule: sluice.RuleRef{Metric: "concurrency"}}, nil, codes.Unavailable, time.Second},
		{"system", sluice.BlockError{Type: sluice.BlockSystem, Rule: sluice.RuleRef{Metric: "cpu-usage"}}, nil, codes.Unavailable, time.Second},
		{"breaker open", sluice.BlockError{Type: sluice.BlockDegrade, RetryAfter: 4200 * time.Millisecond}, nil, codes.Unavailable, 4200 * time.Millisecond},
		{"breaker half-open", sluice.BlockError{Type: sluice.BlockDegrade}, nil, codes.Unavailable, time.Second},
		{"cluster", sluice.BlockError{Type: sluice.BlockCluster}, nil, codes.ResourceExhausted, 0},
		{"authority", sluice.BlockError{Type: sluice.BlockAuthority, Rule: sluice.RuleRef{Metric: "deny"}}, nil, codes.PermissionDenied, 0},
		{"custom", sluice.BlockError{Type: sluice.BlockCustom, RetryAfter: 3 * time.Second}, nil, codes.ResourceExhausted, 3 * time.Second},
		{"policy: overload wait", sluice.BlockError{Type: sluice.BlockFlow, Rule: sluice.RuleRef{Metric: "concurrency"}},
			&sluicegrpc.RefusalPolicy{OverloadRetryAfter: 2500 * time.Millisecond}, codes.Unavailable, 2500 * time.Millisecond},
		{"policy: no overload wait", sluice.BlockError{Type: sluice.BlockSystem},
			&sluicegrpc.RefusalPolicy{OverloadRetryAfter: -1}, codes.Unavailable, 0},
		{"policy: code", sluice.BlockError{Type: sluice.BlockFlow, Rule: sluice.RuleRef{Metric: "concurrency"}},
			&sluicegrpc.RefusalPolicy{Code: func(*sluice.BlockError) codes.Code { return codes.ResourceExhausted }}, codes.ResourceExhausted, time.Second},
		{"policy: details", sluice.BlockError{Type: sluice.BlockFlow, Rule: qps, Observed: 12, Threshold: 10, RetryAfter: time.Second, Reason: "warming up"},
			&sluicegrpc.RefusalPolicy{Details: true}, codes.ResourceExhausted, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var opts []sluicegrpc.Option
			if tt.policy != nil {
				opts = append(opts, sluicegrpc.WithRefusalPolicy(*tt.policy))
			}
			f := start(t, opts...)
			ref := &refuser{}
			require.NoError(t, f.srv.RegisterSlot(ref, 0))
			_, err := f.call(t, context.Background(), "x")
			require.NoError(t, err)
			ref.be.Store(&tt.be)
			_, err = f.call(t, context.Background(), "x")

			st := status.Convert(err)
			require.Equal(t, tt.wantCode, st.Code(), "%v", err)
			assert.Equal(t, "sluice: blocked by "+tt.be.Type.String()+" rule", st.Message())
			delay, info := refusalDetails(t, st)
			assert.Equal(t, tt.wantDelay, delay, "RetryInfo delay")
			if tt.policy == nil || !tt.policy.Details {
				assert.Nil(t, info, "ErrorInfo without Details")
			} else {
				require.NotNil(t, info)
				assert.Equal(t, [2]string{"FLOW", sluicegrpc.ErrorInfoDomain}, [2]string{info.GetReason(), info.GetDomain()})
				assert.Equal(t, map[string]string{
					"resource": unaryMethod, "observed": "12", "threshold": "10",
					"rule_id": "checkout-qps", "reason": "warming up",
				}, info.GetMetadata())
			}
			pass, block, _, conc := snapshot(t, f.srv, unaryMethod)
			require.Equal(t, [3]uint64{1, 1, 0}, [3]uint64{pass, block, uint64(conc)}, "pass, block, in flight")
		})
	}
}

// TestRefusalMessagesAreStable makes 1,000 refusals on a real server, with
// every block type and numbers and waits that change at each call, as a
// busy rule's do: the messages must be as many as the block types, and
// name no number.
func TestRefusalMessagesAreStable(t *testing.T) {
	const n = 1000
	types := []sluice.BlockType{
		sluice.BlockFlow, sluice.BlockSystem, sluice.BlockParam,
		sluice.BlockDegrade, sluice.BlockCluster, sluice.BlockCustom,
	}
	f := start(t)
	ref := &refuser{}
	require.NoError(t, f.srv.RegisterSlot(ref, 0))
	messages := map[string]int{}
	for i := range n {
		ref.be.Store(&sluice.BlockError{
			Type:       types[i%len(types)],
			Observed:   float64(100 + i),
			Threshold:  100,
			RetryAfter: time.Duration(i+1) * time.Millisecond,
		})
		_, err := f.call(t, context.Background(), "x")
		require.Error(t, err)
		messages[status.Convert(err).Message()]++
	}
	assert.Equal(t, len(types), len(messages), "distinct messages among %d refusals", n)
	for m := range messages {
		assert.False(t, strings.ContainsAny(m, "0123456789"), "message %q names a number", m)
		assert.NotContains(t, m, unaryMethod)
	}
	_, block, _, _ := snapshot(t, f.srv, unaryMethod)
	assert.Equal(t, uint64(n), block)
}

// TestBlockFuncNilFallsBackToPolicy: a block func that returns nil gets the
// policy's status.
func TestBlockFuncNilFallsBackToPolicy(t *testing.T) {
	f := start(t,
		sluicegrpc.WithBlockFunc(func(context.Context, string, error) error { return nil }),
		sluicegrpc.WithRefusalPolicy(sluicegrpc.RefusalPolicy{OverloadRetryAfter: 2 * time.Second}))
	ref := &refuser{}
	require.NoError(t, f.srv.RegisterSlot(ref, 0))
	ref.be.Store(&sluice.BlockError{Type: sluice.BlockFlow, Rule: sluice.RuleRef{Metric: "concurrency"}})
	_, err := f.call(t, context.Background(), "x")
	st := status.Convert(err)
	require.Equal(t, codes.Unavailable, st.Code())
	delay, _ := refusalDetails(t, st)
	require.Equal(t, 2*time.Second, delay)
}
