package refusal

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/sluice-go/sluice/internal/core"
)

// TestRateLimitFields: the fields' values for budgets at the edges: a rule
// without an ID, IDs a structured-field String must escape or cannot hold,
// a fractional limit, sub-second windows and resets (rounded up), and a
// negative Remaining (never sent below zero).
func TestRateLimitFields(t *testing.T) {
	tests := []struct {
		name          string
		give          core.Budget
		policy, state string
		x             [3]string
	}{
		{"default policy", core.Budget{Limit: 100, Remaining: 42, Reset: 950 * time.Millisecond, Window: time.Second},
			`"default";q=100;w=1`, `"default";r=42;t=1`, [3]string{"100", "42", "1"}},
		{"named, long window", core.Budget{Limit: 30, Remaining: 0, Reset: 59*time.Second + 1, Window: time.Minute, Rule: core.RuleRef{ID: "mail"}},
			`"mail";q=30;w=60`, `"mail";r=0;t=60`, [3]string{"30", "0", "60"}},
		{"fractional limit, short window", core.Budget{Limit: 2.5, Remaining: -1, Reset: 0, Window: 100 * time.Millisecond, Rule: core.RuleRef{ID: `a"b\c`}},
			`"a\"b\\c";q=2;w=1`, `"a\"b\\c";r=0;t=0`, [3]string{"2", "0", "0"}},
		{"non-ASCII and control characters", core.Budget{Limit: 1, Window: time.Second, Rule: core.RuleRef{ID: "größe\n"}},
			`"gr____e_";q=1;w=1`, `"gr____e_";r=0;t=0`, [3]string{"1", "0", "0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, s := RateLimitFields(tt.give)
			assert.Equal(t, tt.policy, p)
			assert.Equal(t, tt.state, s)
			l, r, x := XRateLimitFields(tt.give)
			assert.Equal(t, tt.x, [3]string{l, r, x})
		})
	}
	p, _ := RateLimitFields(core.Budget{Limit: 1, Rule: core.RuleRef{ID: strings.Repeat("x", 1000)}})
	assert.Equal(t, `"`+strings.Repeat("x", maxPolicyName)+`";q=1;w=1`, p, "a long ID is cut")
}
