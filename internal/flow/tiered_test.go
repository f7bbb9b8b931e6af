package flow

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sluice-go/sluice/rules"
)

// TestNextTier: up past every Above the value exceeds, else down past
// every Below it is under; inside a band the step stays, whichever it is.
func TestNextTier(t *testing.T) {
	tiers := []rules.Tier{{Above: 100, Below: 80, Threshold: 500}, {Above: 200, Below: 180, Threshold: 200}, {Above: 300, Threshold: 50}}
	for _, c := range []struct {
		cur  int
		v    float64
		want int
	}{
		{0, 50, 0}, {0, 100, 0}, {0, 100.5, 1}, {0, 250, 2}, {0, 1000, 3},
		{1, 90, 1}, {1, 80, 1}, {1, 79.9, 0}, {1, 150, 1}, {1, 201, 2},
		{2, 190, 2}, {2, 179, 1}, {2, 70, 0}, {2, 100, 1},
		{3, 300, 3}, {3, 299, 2}, {3, 185, 2}, {3, 10, 0},
	} {
		assert.Equal(t, c.want, nextTier(tiers, c.cur, c.v), "from %d at %v", c.cur, c.v)
	}
}
