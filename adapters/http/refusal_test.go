package sluicehttp_test

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"sync/atomic"

	sluicehttp "github.com/sluice-go/sluice/adapters/http"
	"github.com/sluice-go/sluice/core"
	"github.com/sluice-go/sluice/internal/refusal"
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

// refusalCase is one refusal and the response it must get.
type refusalCase struct {
	name       string
	be         core.BlockError
	policy     *sluicehttp.RefusalPolicy // nil: the default
	wantStatus int
	retryAfter string // "" for no header
}

// refusalCases covers every block type, with and without a wait, under the
// default policy and a configured one.
func refusalCases() []refusalCase {
	qps, conc := core.RuleRef{Metric: "qps"}, core.RuleRef{Metric: "concurrency"}
	return []refusalCase{
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
		{"policy: status out of range is the default", core.BlockError{Type: core.BlockFlow, Rule: qps},
			&sluicehttp.RefusalPolicy{Status: func(be *core.BlockError) int { return 0 }}, 429, ""},
	}
}

// TestRefusalResponses refuses a request on a real server with each block
// type: rate limits get 429, overload 503, each with the Retry-After the
// policy gives, and a body that is the status text and nothing else.
func TestRefusalResponses(t *testing.T) {
	for _, tt := range refusalCases() {
		t.Run(tt.name, func(t *testing.T) {
			g, _ := newEngine(t)
			ref := &refuser{}
			require.NoError(t, g.RegisterSlot(ref, 0))
			var opts []sluicehttp.Option
			if tt.policy != nil {
				opts = append(opts, sluicehttp.WithRefusalPolicy(*tt.policy))
			}
			mux := http.NewServeMux()
			mux.HandleFunc("GET /x", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "x") })
			srv, c := serve(t, sluicehttp.Middleware(g, opts...)(mux))

			require.Equal(t, response{status: 200, body: "x"}, get(t, c, "GET", srv.URL+"/x"))
			ref.be.Store(&tt.be)
			want := response{status: tt.wantStatus, body: http.StatusText(tt.wantStatus), retryAfter: tt.retryAfter}
			require.Equal(t, want, get(t, c, "GET", srv.URL+"/x"))
			pass, block, _, conc := snapshot(t, g, "GET /x")
			require.Equal(t, [3]uint64{1, 1, 0}, [3]uint64{pass, block, uint64(conc)}, "pass, block, in flight")
		})
	}
}

func TestOverloadClassifies(t *testing.T) {
	for _, tt := range refusalCases() {
		if tt.policy != nil {
			continue
		}
		be := tt.be
		require.Equal(t, tt.wantStatus == 503, be.Overloaded(), tt.name)
		require.Equal(t, tt.wantStatus, refusal.DefaultStatus(&be), tt.name)
	}
	require.False(t, (*core.BlockError)(nil).Overloaded())
	status, wait := refusal.Response(nil, 0, io.EOF)
	require.Equal(t, [2]int64{429, 0}, [2]int64{int64(status), wait}, "not a block error")
}
