package rulewalk

import (
	"reflect"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStrings(t *testing.T) {
	type inner struct{ Name string }
	type rule struct {
		ID       string
		Resource string
		N        int
		Ex       map[string]int64
		In       *inner
		List     []inner
		hidden   string
	}
	r := rule{ID: "i", Resource: "r", Ex: map[string]int64{"k": 1}, In: &inner{"p"}, List: []inner{{"l"}}, hidden: "h"}
	var got []string
	require.NoError(t, Strings(reflect.ValueOf(r), func(field, s string, key bool) error {
		got = append(got, field+"="+s+map[bool]string{true: " (key)"}[key])
		return nil
	}))
	sort.Strings(got)
	require.Equal(t, []string{"Ex=k (key)", "ID=i", "In=p", "List=l", "Resource=r"}, got)
}
