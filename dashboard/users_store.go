package dashboard

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-go/sluice"
)

// errUsersConflict is the refusal of a change made against a version of
// the users that is no longer the current one.
var errUsersConflict = errors.New("dashboard: the users changed since the page was loaded")

// errUsersStorage marks a failure to read, lock or write the users file,
// as opposed to the refusal of a change.
var errUsersStorage = errors.New("the users file cannot be written")

// usersRecheck is how often, at most, the users file is read again to
// pick up edits made on disk.
const usersRecheck = time.Second

// userSet is one version of the users: immutable once published.
type userSet struct {
	list    []User
	byName  map[string]*User
	princ   map[string]*principal // the principal of each user, built once
	version string                // hex SHA-256 of the file's content; "" for Config.Users
}

func newUserSet(us []User, version string) *userSet {
	s := &userSet{list: us, byName: make(map[string]*User, len(us)), princ: make(map[string]*principal, len(us)), version: version}
	for i := range us {
		u := &us[i]
		role, _ := ParseRole(u.Role)
		p := &principal{name: u.Name, role: role, apps: make(map[string]bool, len(u.Apps))}
		for _, a := range u.Apps {
			p.apps[a] = true
		}
		s.byName[u.Name] = u
		s.princ[u.Name] = p
	}
	return s
}

// admins counts the users with the admin role.
func (s *userSet) admins() int {
	n := 0
	for _, p := range s.princ {
		if p.role == Admin {
			n++
		}
	}
	return n
}

// usersStore holds the dashboard's users: those of Config.Users, fixed,
// or those of a users file, which it reads again when the file changes on
// disk (checked at most once a second, on access) and which it writes
// when an admin changes users. It is safe for concurrent use.
type usersStore struct {
	path  string // "" when the users are fixed
	clock sluice.Clock

	cur     atomic.Pointer[userSet]
	checked atomic.Int64 // when the file was last read, on clock

	mu      sync.Mutex // serializes reading and writing the file
	loadErr error      // the last reload's failure, under mu
}

func newUsersStore(fixed []User, path string, clock sluice.Clock) (*usersStore, error) {
	s := &usersStore{path: path, clock: clock}
	if path == "" {
		s.cur.Store(newUserSet(fixed, ""))
		return s, nil
	}
	data, err := readUsersFile(path)
	if err != nil {
		return nil, err
	}
	us, err := ParseUsers(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s.cur.Store(newUserSet(us, contentVersion(data)))
	s.checked.Store(clock.Nanotime())
	return s, nil
}

// editable reports whether the users may be changed (they come from a
// file).
func (s *usersStore) editable() bool { return s.path != "" }

// current returns the users in force, first reading the file again when
// it was last read a second ago or more.
func (s *usersStore) current() *userSet {
	if s.path == "" {
		return s.cur.Load()
	}
	now := s.clock.Nanotime()
	last := s.checked.Load()
	if now-last >= int64(usersRecheck) && s.checked.CompareAndSwap(last, now) {
		s.mu.Lock()
		s.reloadLocked()
		s.mu.Unlock()
	}
	return s.cur.Load()
}

// reloadError returns why the file on disk was not taken at the last
// reading, or nil.
func (s *usersStore) reloadError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loadErr
}

// reloadLocked reads the file and publishes its users when its content
// changed. A file that is missing or invalid leaves the users in force,
// and the error is kept for the users page.
func (s *usersStore) reloadLocked() {
	data, err := readUsersFile(s.path)
	if err != nil {
		s.loadErr = err
		return
	}
	v := contentVersion(data)
	if v == s.cur.Load().version {
		s.loadErr = nil
		return
	}
	us, err := ParseUsers(data)
	if err != nil {
		s.loadErr = fmt.Errorf("%s: %w", s.path, err)
		return
	}
	s.loadErr = nil
	s.cur.Store(newUserSet(us, v))
}

// update applies change to the users of the file, if the file still holds
// the version base, and writes the result atomically (a temporary file in
// the same directory, synced, renamed over the file). It returns
// errUsersConflict when the file holds another version, and change's
// error, or the validation error of its result, otherwise.
func (s *usersStore) update(base string, change func(us []User) ([]User, error)) error {
	if s.path == "" {
		return errors.New("dashboard: the users are given in the configuration and cannot be changed here")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Other dashboard processes on the same file wait too.
	unlock, err := lockDir(filepath.Dir(s.path))
	if err != nil {
		return fmt.Errorf("%w: %w", errUsersStorage, err)
	}
	defer unlock()
	// The file on disk, not the copy in memory, is what the change is
	// compared with: an edit made by hand since counts.
	data, err := readUsersFile(s.path)
	if err != nil {
		return fmt.Errorf("%w: %w", errUsersStorage, err)
	}
	if contentVersion(data) != base {
		s.reloadLocked()
		return errUsersConflict
	}
	us, err := ParseUsers(data)
	if err != nil {
		return fmt.Errorf("%s: %w", s.path, err)
	}
	next, err := change(us)
	if err != nil {
		return err
	}
	if err := validateUsers(next); err != nil {
		return err
	}
	out, err := yaml.Marshal(usersFile{Users: next})
	if err != nil {
		return fmt.Errorf("dashboard: users file: %w", err)
	}
	if len(out) > maxUsersFile {
		return fmt.Errorf("dashboard: users file would be %d bytes, more than %d", len(out), maxUsersFile)
	}
	if err := writeFileAtomic(s.path, out); err != nil {
		return fmt.Errorf("%w: %w", errUsersStorage, err)
	}
	s.cur.Store(newUserSet(next, contentVersion(out)))
	s.loadErr = nil
	s.checked.Store(s.clock.Nanotime())
	return nil
}

func contentVersion(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}

// readUsersFile reads at most maxUsersFile+1 bytes of path (ParseUsers
// refuses more), after checking its mode (checkUsersMode).
func readUsersFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	if err := checkUsersMode(path, fi.Mode()); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, maxUsersFile+1))
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	return data, nil
}

// checkUsersMode refuses a users file that others than its owner and
// group may read or write, or that its group may write: the password
// hashes in it can be attacked offline, and whoever writes it chooses the
// admins. A group may read it (a service group the dashboard runs in);
// the users page then says so. Windows has no such modes: nothing is
// checked there.
func checkUsersMode(path string, mode os.FileMode) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	if perm := mode.Perm(); perm&0o027 != 0 {
		return fmt.Errorf("dashboard: users file %s has mode %04o: others may read or change it, or its group may "+
			"change it; the dashboard refuses it: chmod 600 %s (or 640)", path, perm, path)
	}
	return nil
}

// groupReadable says, for the users page, when the users file is
// readable by its group; "" when it is not.
func groupReadable(path string) string {
	fi, err := os.Stat(path)
	if err != nil || runtime.GOOS == "windows" || fi.Mode().Perm()&0o040 == 0 {
		return ""
	}
	return fmt.Sprintf("The users file is readable by its group (mode %04o): its members can attack the password hashes offline; "+
		"chmod 600 it unless that group needs it.", fi.Mode().Perm())
}

// writeFileAtomic replaces path with data: readers see the old file or the
// new one, never a part, and the new one survives a crash once this
// returns. The file keeps its permissions (0600 for a new one).
func writeFileAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	mode := os.FileMode(0o600)
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("dashboard: writing the users file: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err = tmp.Chmod(mode); err != nil {
		return fmt.Errorf("dashboard: writing the users file: %w", err)
	}
	if _, err = tmp.Write(data); err != nil {
		return fmt.Errorf("dashboard: writing the users file: %w", err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("dashboard: writing the users file: %w", err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("dashboard: writing the users file: %w", err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("dashboard: writing the users file: %w", err)
	}
	// The rename itself is made durable by syncing the directory; a
	// filesystem that cannot sync a directory has done what it can.
	if d, derr := os.Open(dir); derr == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// endUser ends every session of the user name.
func (s *sessions) endUser(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ss := range slices.Clone(s.byUser[name]) {
		s.deleteLocked(ss.id)
	}
}
