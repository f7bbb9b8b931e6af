package rulewalk_test

import (
	"reflect"
	"testing"

	"github.com/sluice-go/sluice/internal/rulewalk"
	"github.com/sluice-go/sluice/rules"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestClone(t *testing.T) {
	a := rules.Flow{Resource: "r", Threshold: 10, Cluster: &rules.Cluster{Strict: true}}
	b := rulewalk.Clone(a)
	require.NotSame(t, a.Cluster, b.Cluster)
	require.Equal(t, a, b)
	b.Cluster.Strict = false
	assert.True(t, a.Cluster.Strict, "the clone shares nothing")

	p := rules.Param{Resource: "r", Threshold: 2, Exceptions: map[string]int64{"v": 1}, Cluster: &rules.Cluster{}}
	c := rulewalk.Clone(p)
	require.True(t, reflect.DeepEqual(p, c))
	c.Exceptions["v"] = 9
	assert.Equal(t, int64(1), p.Exceptions["v"], "the clone shares no map")
	assert.Equal(t, rules.Param{Resource: "x"}, rulewalk.Clone(rules.Param{Resource: "x"}), "nil stays nil")
	assert.NotNil(t, rulewalk.Clone(rules.Param{Exceptions: map[string]int64{}}).Exceptions, "empty stays empty")
}
