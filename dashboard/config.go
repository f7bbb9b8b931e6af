package dashboard

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"golang.org/x/crypto/bcrypt"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
)

// Role is what a user may do.
type Role uint8

const (
	// Viewer sees the applications granted to it: instances, charts,
	// rules, history and audit log.
	Viewer Role = iota + 1
	// Editor is a Viewer that also changes the rules of the applications
	// granted to it (save, delete, roll back).
	Editor
	// Admin does everything on every application and sees the users, their
	// roles and grants, and the whole audit log.
	Admin
)

// String returns "viewer", "editor" or "admin".
func (r Role) String() string {
	switch r {
	case Viewer:
		return "viewer"
	case Editor:
		return "editor"
	case Admin:
		return "admin"
	}
	return "none"
}

// ParseRole returns the Role named s ("viewer", "editor", "admin").
func ParseRole(s string) (Role, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "viewer":
		return Viewer, nil
	case "editor":
		return Editor, nil
	case "admin":
		return Admin, nil
	}
	return 0, fmt.Errorf("dashboard: unknown role %q: want viewer, editor or admin", clip(s))
}

// User is one account of the dashboard, as a users file lists it.
type User struct {
	// Name is the login name; unique, required.
	Name string `yaml:"name"`
	// Hash is the bcrypt hash of the password (htpasswd -nbB, or
	// sluice-dashboard -hash). Required.
	Hash string `yaml:"hash"`
	// Role is "viewer", "editor" or "admin".
	Role string `yaml:"role"`
	// Apps lists the applications granted; "*" grants every one. An admin
	// is granted every application whatever it lists.
	Apps []string `yaml:"apps,omitempty"`
}

// usersFile is the format of a users file.
type usersFile struct {
	Users []User `yaml:"users"`
}

// maxUsersFile bounds the size of a users file.
const maxUsersFile = 1 << 20

// ParseUsers reads a users file:
//
//	users:
//	  - name: alice
//	    hash: $2a$10$...   # bcrypt
//	    role: editor
//	    apps: [shop]
//
// and validates every user: an error names the user (by position and name)
// and the field.
func ParseUsers(data []byte) ([]User, error) {
	if len(data) > maxUsersFile {
		return nil, fmt.Errorf("dashboard: users file is %d bytes, more than %d", len(data), maxUsersFile)
	}
	var f usersFile
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("dashboard: users file: %w", err)
	}
	if err := validateUsers(f.Users); err != nil {
		return nil, err
	}
	return f.Users, nil
}

// LoadUsers reads and validates the users file at path (see ParseUsers).
// On Unix it refuses a file that others may read or write, or that its
// group may write (chmod 600, or 640).
func LoadUsers(path string) ([]User, error) {
	data, err := readUsersFile(path)
	if err != nil {
		return nil, err
	}
	us, err := ParseUsers(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return us, nil
}

func validateUsers(us []User) error {
	seen := map[string]int{}
	for i, u := range us {
		bad := func(field, format string, args ...any) error {
			return fmt.Errorf("dashboard: user %d (%q): %s: %s", i, clip(u.Name), field, fmt.Sprintf(format, args...))
		}
		if u.Name == "" {
			return bad("name", "required")
		}
		if len(u.Name) > 64 || strings.ContainsAny(u.Name, " \t\r\n") {
			return bad("name", "at most 64 characters, no spaces")
		}
		if j, ok := seen[u.Name]; ok {
			return bad("name", "given twice (also user %d)", j)
		}
		seen[u.Name] = i
		if _, err := ParseRole(u.Role); err != nil {
			return bad("role", "%q: want viewer, editor or admin", clip(u.Role))
		}
		if _, err := bcrypt.Cost([]byte(u.Hash)); err != nil {
			return bad("hash", "not a bcrypt hash (%v)", err)
		}
	}
	return nil
}

// TrustedProxy configures the trusted-header mode: an authenticating proxy
// in front of the dashboard names the user, and the dashboard shows no
// login page.
type TrustedProxy struct {
	// From lists the addresses (as prefixes: 10.0.0.5/32, 10.0.0.0/8) the
	// proxy connects from. A request from any other address is treated as
	// anonymous, whatever headers it carries. Required.
	From []netip.Prefix
	// UserHeader, RoleHeader and AppsHeader name the headers carrying the
	// user's name, role ("viewer", "editor", "admin") and granted
	// applications (comma-separated, "*" for every one). Zero means
	// "X-Sluice-User", "X-Sluice-Role" and "X-Sluice-Apps".
	UserHeader, RoleHeader, AppsHeader string
}

func (p *TrustedProxy) headers() (user, role, apps string) {
	user, role, apps = p.UserHeader, p.RoleHeader, p.AppsHeader
	if user == "" {
		user = "X-Sluice-User"
	}
	if role == "" {
		role = "X-Sluice-Role"
	}
	if apps == "" {
		apps = "X-Sluice-Apps"
	}
	return user, role, apps
}

// Members lists the live instances of an application; cluster.Store
// implements it.
type Members interface {
	Members(ctx context.Context, app string) ([]cluster.Member, error)
}

// Config configures a Dashboard. Rules (or RulesDir) or an Engine with
// RulesDir (or Rules) is required; Users or Proxy is required.
type Config struct {
	// Rules is the store of the applications' rules. With an Engine, the
	// Engine's rules are kept there under App.
	Rules cluster.RuleStore
	// RulesDir is a directory (created if needed) that New opens as Rules
	// with cluster/filestore: the rules of every version, their history
	// and the audit log as plain files, which a restart finds again. Set
	// Rules or RulesDir, not both.
	RulesDir string
	// Telemetry carries the frames of the fleet's instances. Nil with an
	// Engine means the Engine publishes its frames to the dashboard, in
	// memory (fleet.Join), for Window.
	Telemetry cluster.Telemetry
	// Engine, when set, is an engine of the dashboard's own process, shown
	// as the application App (one instance, the Engine's InstanceID). New
	// loads into it the version of App in force in the rule store, or,
	// when App has none, saves the Engine's rules as version 1; each
	// version saved through the dashboard goes into the Engine before it
	// is written (a version the Engine refuses is not written). The
	// Engine must not follow a rule store of its own (fleet.Join with
	// Rules): the dashboard cannot tell, and the two would load over each
	// other. An Engine that publishes its frames already (fleet.Join with
	// Telemetry) is shown from that store: set Telemetry to it.
	Engine *sluice.Engine
	// App names the Engine's application; zero means "local".
	App string
	// Apps lists applications to show besides those with rules in the
	// store and those whose instances publish frames or heartbeats (found
	// when Telemetry or Members can list them: cluster/redis's do).
	Apps []string
	// Members, when set, lists the live instances of an application (a
	// cluster.Store's heartbeats); otherwise the instances are those seen
	// in frames and rule reports.
	Members Members

	// Users are the accounts that log in with a password, fixed: the users
	// page lists them but cannot change them.
	Users []User
	// UsersFile, instead of Users, is a users file (see ParseUsers) that
	// the dashboard reads at start, reads again when it changed on disk
	// (checked at most once a second, on access), and writes when an admin
	// changes users on the users page. Zero means Users.
	UsersFile string
	// Proxy, when set, enables the trusted-header mode.
	Proxy *TrustedProxy

	// SessionLifetime is how long a session lasts after login; zero means
	// 8 hours.
	SessionLifetime time.Duration
	// MaxSessions bounds the sessions kept; zero means 10,000. When it is
	// full, the session closest to expiry is dropped. Each user keeps at
	// most its 16 newest sessions besides, so that one user's sessions
	// end no other user's.
	MaxSessions int
	// SecureCookies marks cookies Secure even on plain-HTTP requests (the
	// dashboard behind a proxy that terminates TLS). Cookies of requests
	// that came over TLS are always Secure.
	SecureCookies bool
	// LoginsPerIP is the login attempts allowed per minute from one
	// client address, and LoginsPerUser those for one user name from one
	// address; zero means 10 and 5. A name gets 20 times LoginsPerUser a
	// minute from all addresses together. After LoginsPerUser consecutive
	// wrong passwords for a name from an address, that address waits a
	// minute before trying the name again, twice as long after each
	// further wrong one (at most an hour). Beyond the limits, attempts are
	// refused with 429 without checking the password; the name's owner, from
	// another address, is not slowed by an attacker's.
	LoginsPerIP, LoginsPerUser int64
	// Window is how much history the charts show; zero means 5 minutes.
	Window time.Duration

	// Clock measures session lifetimes and paces the login limits; nil
	// means the system clock. (The Engine's frames follow its own clock.)
	Clock sluice.Clock
	// Now is the wall clock, which places the charts' window (frames are
	// stamped with Unix seconds) and dates what RulesDir records; nil
	// means time.Now.
	Now func() time.Time
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
