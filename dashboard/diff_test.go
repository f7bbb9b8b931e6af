package dashboard

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRuleDiff(t *testing.T) {
	tests := []struct {
		name, old, new string
		want           []string
	}{
		{"threshold", "flow:\n  - resource: GET /api\n    threshold: 50\n", "flow:\n  - resource: GET /api\n    threshold: 20\n",
			[]string{"flow rule GET /api: threshold 50 → 20"}},
		{"same", "flow:\n  - resource: a\n    threshold: 5\n", "flow:\n- {resource: a, threshold: 5}\n", nil},
		{"reordered", "flow:\n  - resource: a\n    threshold: 5\n  - resource: b\n    threshold: 6\n",
			"flow:\n  - resource: b\n    threshold: 6\n  - resource: a\n    threshold: 5\n", nil},
		{"added and removed", "isolation:\n  - resource: x\n    threshold: 3\n",
			"param:\n  - resource: POST /orders\n    threshold: 5\n    duration: 1m\n",
			[]string{"flow rule x removed", "param rule POST /orders added: resource POST /orders, threshold 5, duration 1m0s"}},
		{"field new and removed", "flow:\n  - resource: a\n    threshold: 5\n    behavior: throttle\n    maxQueueing: 1s\n",
			"flow:\n  - resource: a\n    threshold: 5\n    statInterval: 2s\n",
			[]string{"flow rule a: statInterval 2s (new); throttle maxQueueing: 1s (removed)"}},
		{"second of a name", "flow:\n  - resource: a\n    threshold: 5\n  - resource: a\n    threshold: 1\n    metric: concurrency\n",
			"flow:\n  - resource: a\n    threshold: 5\n  - resource: a\n    threshold: 2\n    metric: concurrency\n",
			[]string{"flow rule a: threshold 1 → 2"}},
		{"by id", "circuitBreaker:\n  - id: cb1\n    resource: s\n    strategy: error-ratio\n    threshold: 0.5\n    retryTimeout: 5s\n",
			"circuitBreaker:\n  - id: cb1\n    resource: s\n    strategy: error-ratio\n    threshold: 0.25\n    retryTimeout: 5s\n",
			[]string{"circuit breaker rule s (id cb1): threshold 0.5 → 0.25"}},
		{"system", "system:\n  - metric: load1\n    threshold: 8\n", "system:\n  - metric: load1\n    threshold: 16\n",
			[]string{"system rule load1: threshold 8 → 16"}},
		{"nested", "param:\n  - resource: p\n    threshold: 5\n    exceptions:\n      vip: 100\n",
			"param:\n  - resource: p\n    threshold: 5\n    exceptions:\n      vip: 200\n",
			[]string{"param rule p: exceptions vip: 100 → vip: 200"}},
		{"from nothing", "", "flow:\n  - resource: a\n    threshold: 5\n", []string{"flow rule a added: resource a, threshold 5"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := diffDocs([]byte(tt.old), []byte(tt.new))
			require.NoError(t, err)
			if tt.want == nil {
				tt.want = []string{}
			}
			require.Equal(t, tt.want, got)
		})
	}
}

// tenThousand is a document of n flow rules, rule i with threshold th(i).
func tenThousand(n int, th func(int) int) []byte {
	var b strings.Builder
	b.WriteString("flow:\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "  - resource: GET /r%05d\n    threshold: %d\n", i, th(i))
	}
	return []byte(b.String())
}

// TestRuleDiff10k: a change of one rule among 10,000, with the rules
// reordered, is named; 300 changes list 200 and count the rest.
func TestRuleDiff10k(t *testing.T) {
	old := tenThousand(10000, func(i int) int { return 10 })
	one := tenThousand(10000, func(i int) int { return map[bool]int{true: 20, false: 10}[i == 4242] })
	start := time.Now()
	got, err := diffDocs(old, one)
	t.Logf("10,000 rules compared in %v", time.Since(start))
	require.NoError(t, err)
	require.Equal(t, []string{"flow rule GET /r04242: threshold 10 → 20"}, got)
	many := tenThousand(10000, func(i int) int { return map[bool]int{true: 20, false: 10}[i < 300] })
	got, err = diffDocs(old, many)
	require.NoError(t, err)
	require.Len(t, got, 201)
	require.Equal(t, "100 more rules changed", got[200])
}

func BenchmarkRuleDiff10k(b *testing.B) {
	old := tenThousand(10000, func(i int) int { return 10 })
	one := tenThousand(10000, func(i int) int { return map[bool]int{true: 20, false: 10}[i == 4242] })
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := diffDocs(old, one); err != nil {
			b.Fatal(err)
		}
	}
}
