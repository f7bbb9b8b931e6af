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

// TestUsersStoreUnwritable: a directory that refuses the temporary file
// fails the change as a storage error, and the users in force and the
// file stay.
func TestUsersStoreUnwritable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes into a read-only directory: run as another user to test the refusal")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "users.yaml")
	data := []byte("users:\n  - {name: ada, hash: '$2a$04$6k9H4p8ua76Czjbx7N4wieizaEc9RD6yyrI.4e0WkG4A0oX63/mPW', role: admin}\n")
	require.NoError(t, os.WriteFile(path, data, 0o600))
	s, err := newUsersStore(nil, path, sluicetest.NewManualClock(0))
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o500))
	t.Cleanup(func() { os.Chmod(dir, 0o700) })
	err = s.update(contentVersion(data), func(us []User) ([]User, error) {
		us[0].Apps = []string{"shop"}
		return us, nil
	})
	require.ErrorIs(t, err, errUsersStorage)
	require.Empty(t, s.current().princ["ada"].apps)
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, data, got)
}

// TestUsersStoreFileGone: a users file removed from under the dashboard
// fails a change as a storage error; the users in force stay, and the
// reading once a second keeps them too and reports why.
func TestUsersStoreFileGone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "users.yaml")
	data := []byte("users:\n  - {name: ada, hash: '$2a$04$6k9H4p8ua76Czjbx7N4wieizaEc9RD6yyrI.4e0WkG4A0oX63/mPW', role: admin}\n")
	require.NoError(t, os.WriteFile(path, data, 0o600))
	clock := sluicetest.NewManualClock(0)
	s, err := newUsersStore(nil, path, clock)
	require.NoError(t, err)
	require.NoError(t, os.Remove(path))
	err = s.update(contentVersion(data), func(us []User) ([]User, error) { return us, nil })
	require.ErrorIs(t, err, errUsersStorage)
	clock.Advance(usersRecheck)
	require.NotNil(t, s.current().princ["ada"])
	require.ErrorIs(t, s.reloadError(), os.ErrNotExist)
}
