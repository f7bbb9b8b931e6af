package dashboard

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/sluicetest"
)

// TestUsersStoresShareAFile: two stores on one file, as two dashboard
// processes, change it at once from the same version: exactly one change
// is written, the others are conflicts, whichever store makes them.
func TestUsersStoresShareAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "users.yaml")
	data := []byte("users:\n  - {name: ada, hash: '$2a$04$6k9H4p8ua76Czjbx7N4wieizaEc9RD6yyrI.4e0WkG4A0oX63/mPW', role: admin}\n")
	require.NoError(t, os.WriteFile(path, data, 0o600))
	var stores []*usersStore
	for range 2 {
		s, err := newUsersStore(nil, path, sluicetest.NewManualClock(0))
		require.NoError(t, err)
		stores = append(stores, s)
	}
	base := contentVersion(data)
	const n = 16
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = stores[i%2].update(base, func(us []User) ([]User, error) {
				us[0].Apps = []string{fmt.Sprint("app", i)}
				return us, nil
			})
		}()
	}
	wg.Wait()
	won := -1
	for i, err := range errs {
		if err == nil {
			require.Equal(t, -1, won, "two changes on one version were written: %v", errs)
			won = i
			continue
		}
		require.ErrorIs(t, err, errUsersConflict)
	}
	require.NotEqual(t, -1, won)
	us, err := LoadUsers(path)
	require.NoError(t, err)
	require.Equal(t, []string{fmt.Sprint("app", won)}, us[0].Apps)
}
