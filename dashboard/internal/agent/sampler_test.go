package agent

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/core"
	"github.com/sluice-go/sluice/stat"
)

func TestApportion(t *testing.T) {
	at := func(kv ...uint64) (a [stat.BlockTypes]uint64) {
		for i := 0; i < len(kv); i += 2 {
			a[kv[i]] = kv[i+1]
		}
		return a
	}
	flow, param := uint64(core.BlockFlow), uint64(core.BlockParam)
	tests := []struct {
		block     uint64
		now, prev [stat.BlockTypes]uint64
		want      [stat.BlockTypes]uint64
	}{
		{10, at(flow, 30), at(flow, 20), at(flow, 10)},
		{768, at(flow, 801), at(), at(flow, 768)}, // first frame: the mix since the start
		{10, at(flow, 15, param, 5), at(), at(flow, 8, param, 2)},
		{7, at(flow, 3, param, 3), at(), at(flow, 4, param, 3)}, // rounding to the main reason
		{0, at(flow, 3), at(), at()},
		{5, at(flow, 3), at(flow, 3), at()}, // no refusal in the interval: no reason to give
	}
	for _, tt := range tests {
		got := apportion(tt.block, tt.now, tt.prev)
		require.Equal(t, tt.want, got, "apportion(%d, %v, %v)", tt.block, tt.now, tt.prev)
		var sum uint64
		for _, n := range got {
			sum += n
		}
		if got != ([stat.BlockTypes]uint64{}) {
			require.Equal(t, tt.block, sum)
		}
	}
}
