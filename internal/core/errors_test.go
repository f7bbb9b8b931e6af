package core

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestBlockErrorError(t *testing.T) {
	base := func(typ BlockType) *BlockError {
		return &BlockError{Type: typ, Resource: "GET /orders", Observed: 120, Threshold: 100}
	}
	with := func(e *BlockError, f func(*BlockError)) *BlockError { f(e); return e }

	tests := []struct {
		name string
		give *BlockError
		want string
	}{
		{name: "flow", give: base(BlockFlow), want: `sluice: blocked by flow rule on "GET /orders": observed 120, threshold 100`},
		{name: "system", give: base(BlockSystem), want: `sluice: blocked by system rule on "GET /orders": observed 120, threshold 100`},
		{name: "param", give: base(BlockParam), want: `sluice: blocked by param rule on "GET /orders": observed 120, threshold 100`},
		{name: "degrade", give: base(BlockDegrade), want: `sluice: blocked by degrade rule on "GET /orders": observed 120, threshold 100`},
		{name: "cluster", give: base(BlockCluster), want: `sluice: blocked by cluster rule on "GET /orders": observed 120, threshold 100`},
		{name: "custom", give: base(BlockCustom), want: `sluice: blocked by custom rule on "GET /orders": observed 120, threshold 100`},
		{name: "unknown type", give: base(BlockType(42)), want: `sluice: blocked by BlockType(42) rule on "GET /orders": observed 120, threshold 100`},
		{name: "zero value", give: &BlockError{}, want: `sluice: blocked by BlockType(0) rule on "": observed 0, threshold 0`},
		{
			name: "reason",
			give: with(base(BlockFlow), func(e *BlockError) { e.Reason = "wait exceeds max queueing" }),
			want: `sluice: blocked by flow rule on "GET /orders": observed 120, threshold 100 (wait exceeds max queueing)`,
		},
		{
			name: "retry after",
			give: with(base(BlockDegrade), func(e *BlockError) { e.RetryAfter = 1500 * time.Millisecond }),
			want: `sluice: blocked by degrade rule on "GET /orders": observed 120, threshold 100, retry after 1.5s`,
		},
		{
			name: "reason and retry after",
			give: with(base(BlockFlow), func(e *BlockError) {
				e.Reason = "queue full"
				e.RetryAfter = 250 * time.Millisecond
			}),
			want: `sluice: blocked by flow rule on "GET /orders": observed 120, threshold 100 (queue full), retry after 250ms`,
		},
		{
			name: "negative retry after is left out",
			give: with(base(BlockFlow), func(e *BlockError) { e.RetryAfter = -time.Second }),
			want: `sluice: blocked by flow rule on "GET /orders": observed 120, threshold 100`,
		},
		{
			name: "fractional and large values, quoted resource",
			give: &BlockError{Type: BlockDegrade, Resource: `a "b"`, Observed: 0.625, Threshold: 1e12},
			want: `sluice: blocked by degrade rule on "a \"b\"": observed 0.625, threshold 1e+12`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.give.Error())
			var err error = tt.give
			assert.Equal(t, tt.want, err.Error())
			assert.Equal(t, tt.want, fmt.Sprint(err), "%v")
			assert.Equal(t, tt.want, fmt.Sprintf("%s", err), "%s")
		})
	}
}

func TestBlockErrorIsAs(t *testing.T) {
	be := &BlockError{Type: BlockFlow, Resource: "r"}
	cancelled := &BlockError{Type: BlockFlow, Resource: "r", Reason: "context done while queued", Cause: context.Canceled}

	tests := []struct {
		name         string
		give         error
		wantAs       *BlockError // nil: errors.As must fail
		wantBlocked  bool
		wantCanceled bool
	}{
		{name: "block error", give: be, wantAs: be, wantBlocked: true},
		{name: "wrapped once", give: fmt.Errorf("serve: %w", be), wantAs: be, wantBlocked: true},
		{name: "wrapped twice", give: fmt.Errorf("a: %w", fmt.Errorf("b: %w", be)), wantAs: be, wantBlocked: true},
		{name: "joined", give: errors.Join(io.EOF, be), wantAs: be, wantBlocked: true},
		{name: "with context.Canceled cause", give: cancelled, wantAs: cancelled, wantBlocked: true, wantCanceled: true},
		{name: "cause, wrapped", give: fmt.Errorf("x: %w", cancelled), wantAs: cancelled, wantBlocked: true, wantCanceled: true},
		{name: "ErrBlocked itself", give: ErrBlocked, wantBlocked: true},
		{name: "plain context.Canceled", give: context.Canceled, wantCanceled: true},
		{name: "unrelated", give: io.EOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.wantBlocked, errors.Is(tt.give, ErrBlocked), "errors.Is(err, ErrBlocked)")
			assert.Equal(t, tt.wantCanceled, errors.Is(tt.give, context.Canceled), "errors.Is(err, context.Canceled)")
			assert.False(t, errors.Is(tt.give, context.DeadlineExceeded), "errors.Is(err, context.DeadlineExceeded)")

			var got *BlockError
			ok := errors.As(tt.give, &got)
			if tt.wantAs == nil {
				assert.False(t, ok, "errors.As")
				assert.Nil(t, got)
				return
			}
			require.True(t, ok, "errors.As")
			assert.Same(t, tt.wantAs, got)
		})
	}
}

func TestBlockErrorUnwrap(t *testing.T) {
	tests := []struct {
		name string
		give error
	}{
		{name: "no cause", give: nil},
		{name: "context.Canceled", give: context.Canceled},
		{name: "context.DeadlineExceeded", give: context.DeadlineExceeded},
		{name: "wrapped cause", give: fmt.Errorf("queue: %w", context.Canceled)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			be := &BlockError{Type: BlockFlow, Cause: tt.give}
			assert.Equal(t, tt.give, be.Unwrap())
			assert.Equal(t, tt.give, errors.Unwrap(be))
			if tt.give != nil {
				assert.ErrorIs(t, be, tt.give)
			}
			assert.ErrorIs(t, be, ErrBlocked, "a cause does not hide ErrBlocked")
			// The cause is not part of the message: the error says why it
			// was blocked, the cause is reached with errors.Is.
			assert.NotContains(t, be.Error(), "context")
		})
	}
}

func TestBlockErrorFormat(t *testing.T) {
	const msg = `sluice: blocked by flow rule on "GET /orders": observed 120, threshold 100`
	withRule := &BlockError{
		Type: BlockFlow, Resource: "GET /orders", Observed: 120, Threshold: 100,
		Rule: RuleRef{ID: "orders", Metric: "qps"},
	}
	noRule := &BlockError{Type: BlockFlow, Resource: "GET /orders", Observed: 120, Threshold: 100}

	tests := []struct {
		name   string
		format string
		give   error
		want   string
	}{
		{name: "%+v prints the message: the rule is in BlockError.Rule", format: "%+v", give: withRule, want: msg},
		{name: "%v", format: "%v", give: withRule, want: msg},
		{name: "%s", format: "%s", give: withRule, want: msg},
		{name: "%+v without a rule", format: "%+v", give: noRule, want: msg},
		{name: "%+v through a wrap", format: "%+v", give: fmt.Errorf("w: %w", withRule), want: "w: " + msg},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, fmt.Sprintf(tt.format, tt.give))
		})
	}
}

func TestBlockTypeString(t *testing.T) {
	tests := []struct {
		give BlockType
		want string
	}{
		{give: BlockFlow, want: "flow"},
		{give: BlockSystem, want: "system"},
		{give: BlockParam, want: "param"},
		{give: BlockDegrade, want: "degrade"},
		{give: BlockCluster, want: "cluster"},
		{give: BlockCustom, want: "custom"},
		{give: 0, want: "BlockType(0)"},
		{give: BlockAuthority, want: "authority"},
		{give: BlockAuthority + 1, want: "BlockType(8)"},
		{give: 255, want: "BlockType(255)"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.give.String())
			assert.Equal(t, tt.want, fmt.Sprint(tt.give))
		})
	}
}

// TestBlockErrorOverloaded: capacity refusals (concurrency limits, system
// protection, breakers) are overload, answered 503 by the HTTP adapters;
// rate limits, cluster and custom refusals are not (429).
func TestBlockErrorOverloaded(t *testing.T) {
	tests := []struct {
		be   *BlockError
		want bool
	}{
		{&BlockError{Type: BlockFlow, Rule: RuleRef{Metric: "qps"}}, false},
		{&BlockError{Type: BlockFlow}, false}, // the fast path names no rule: a QPS rule
		{&BlockError{Type: BlockFlow, Rule: RuleRef{ID: "c", Metric: "concurrency"}}, true},
		{&BlockError{Type: BlockParam, Rule: RuleRef{Metric: "qps"}}, false},
		{&BlockError{Type: BlockParam, Rule: RuleRef{Metric: "concurrency"}}, false}, // a per-caller quota
		{&BlockError{Type: BlockSystem, Rule: RuleRef{Metric: "cpu-usage"}}, true},
		{&BlockError{Type: BlockSystem, Rule: RuleRef{Metric: "qps"}}, true},
		{&BlockError{Type: BlockDegrade}, true},
		{&BlockError{Type: BlockCluster}, false},
		{&BlockError{Type: BlockCustom}, false},
		{nil, false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.be.Overloaded(), "%+v", tt.be)
	}
}

// TestBlockErrorSize: most refusals allocate one (a QPS reject rule's share
// theirs: flow.reject.refusal); Shadow sits in the
// padding after Type, which keeps it in the 112-byte size class (120 bytes,
// and the 128-byte class, with Shadow last).
func TestBlockErrorSize(t *testing.T) {
	if got := unsafe.Sizeof(BlockError{}); got > 112 {
		t.Fatalf("BlockError is %d bytes, want at most 112", got)
	}
}
