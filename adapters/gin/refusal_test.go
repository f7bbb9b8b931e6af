package sluicegin_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"
	"sync/atomic"

	sluicegin "github.com/sluice-go/sluice/adapters/gin"
	sluicehttp "github.com/sluice-go/sluice/adapters/http"
	"github.com/sluice-go/sluice/core"
	"github.com/sluice-go/sluice/slots"
)

// refuser is a custom rule-check slot that refuses every entry with a copy
// of the block error it holds, or admits it when it holds none: it makes
// any block type the engine can return, with any rule and wait.
type refuser struct {
	be atomic.Pointer[core.BlockError]
}

func (r *refuser) Check(*slots.Entry) *core.BlockError {
	if be := r.be.Load(); be != nil {
		c := *be
		return &c
	}
	return nil
}

// TestRefusalResponses refuses a request on a real server with each block
// type: the responses are the net/http adapter's (429 for rate limits, 503
// for overload, the policy's Retry-After, the status text as the body).
func TestRefusalResponses(t *testing.T) {
	qps, conc := core.RuleRef{Metric: "qps"}, core.RuleRef{Metric: "concurrency"}
	tests := []struct {
		name       string
		be         core.BlockError
		policy     *sluicehttp.RefusalPolicy // nil: the default
		wantStatus int
		retryAfter string // "" for no header
	}{
		{"flow QPS, wait under a second", core.BlockError{Type: core.BlockFlow, Rule: qps, RetryAfter: 300 * time.Millisecond}, nil, 429, "1"},
		{"flow QPS, wait rounds up", core.BlockError{Type: core.BlockFlow, Rule: qps, RetryAfter: 1500 * time.Millisecond}, nil, 429, "2"},
		{"flow QPS, no wait (batch over threshold)", core.BlockError{Type: core.BlockFlow, Rule: qps}, nil, 429, ""},
		{"flow QPS fast check (no rule)", core.BlockError{Type: core.BlockFlow, RetryAfter: 2 * time.Second}, nil, 429, "2"},
		{"flow concurrency", core.BlockError{Type: core.BlockFlow, Rule: conc}, nil, 503, "1"},
		{"param", core.BlockError{Type: core.BlockParam, Rule: core.RuleRef{Metric: "qps"}, RetryAfter: 250 * time.Millisecond}, nil, 429, "1"},
		{"param, no wait", core.BlockError{Type: core.BlockParam, Rule: core.RuleRef{Metric: "concurrency"}}, nil, 429, ""},
		{"isolation", core.BlockError{Type: core.BlockFlow, Rule: core.RuleRef{Metric: "concurrency"}}, nil, 503, "1"},
		{"system", core.BlockError{Type: core.BlockSystem, Rule: core.RuleRef{Metric: "cpu-usage"}}, nil, 503, "1"},
		{"breaker open", core.BlockError{Type: core.BlockDegrade, RetryAfter: 4200 * time.Millisecond}, nil, 503, "5"},
		{"breaker half-open", core.BlockError{Type: core.BlockDegrade}, nil, 503, "1"},
		{"cluster", core.BlockError{Type: core.BlockCluster}, nil, 429, ""},
		{"custom", core.BlockError{Type: core.BlockCustom}, nil, 429, ""},
		{"custom with a wait", core.BlockError{Type: core.BlockCustom, RetryAfter: 3 * time.Second}, nil, 429, "3"},
		{"policy: overload wait", core.BlockError{Type: core.BlockFlow, Rule: core.RuleRef{Metric: "concurrency"}},
			&sluicehttp.RefusalPolicy{OverloadRetryAfter: 2500 * time.Millisecond}, 503, "3"},
		{"policy: no overload wait", core.BlockError{Type: core.BlockSystem},
			&sluicehttp.RefusalPolicy{OverloadRetryAfter: -1}, 503, ""},
		{"policy: the rule's own wait wins", core.BlockError{Type: core.BlockDegrade, RetryAfter: 4 * time.Second},
			&sluicehttp.RefusalPolicy{OverloadRetryAfter: time.Minute}, 503, "4"},
		{"policy: status", core.BlockError{Type: core.BlockFlow, Rule: core.RuleRef{Metric: "concurrency"}},
			&sluicehttp.RefusalPolicy{Status: func(be *core.BlockError) int { return 429 }}, 429, "1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, _ := newEngine(t)
			ref := &refuser{}
			require.NoError(t, g.RegisterSlot(ref, 0))
			var opts []sluicegin.Option
			if tt.policy != nil {
				opts = append(opts, sluicegin.WithRefusalPolicy(*tt.policy))
			}
			r := gin.New()
			r.Use(sluicegin.Middleware(g, opts...))
			r.GET("/x", func(c *gin.Context) { c.String(200, "x") })
			srv, c := serve(t, r)

			require.Equal(t, response{status: 200, body: "x"}, do(t, c, "GET", srv.URL+"/x"))
			ref.be.Store(&tt.be)
			want := response{status: tt.wantStatus, body: http.StatusText(tt.wantStatus), retryAfter: tt.retryAfter}
			require.Equal(t, want, do(t, c, "GET", srv.URL+"/x"))
			pass, block, _, conc := snapshot(t, g, "GET /x")
			require.Equal(t, [3]uint64{1, 1, 0}, [3]uint64{pass, block, uint64(conc)}, "pass, block, in flight")
		})
	}
}
