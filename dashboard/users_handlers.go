package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/crypto/bcrypt"

	"github.com/sluice-go/sluice/cluster"
)

// Password rules of the users page: at least minPassword characters, and
// at most maxPassword bytes (what bcrypt reads).
const (
	minPassword = 12
	maxPassword = 72
)

// maxGrants bounds the applications granted to one user from the page.
const maxGrants = 100

// userRow is one user on the users page.
type userRow struct {
	Name, Role string
	Apps       []string
	AppsText   string // the grants as the form shows them, "shop, billing"
}

// usersData is what the users page shows.
type usersData struct {
	Users    []userRow
	Editable bool
	// Managed says where the users are managed when the page cannot
	// change them: "proxy" or "config".
	Managed     string
	Path        string // the users file
	Version     string // the file's version, sent back with every change
	ReloadErr   string // why the file on disk is not in force
	ModeWarning string // the file is readable by its group
	MinPassword int
	Roles       []string
	// Add holds the add form's values after a refusal.
	Add userRow
}

func (d *Dashboard) usersData() *usersData {
	set := d.accounts.current()
	ud := &usersData{Path: d.accounts.path, Version: set.version, MinPassword: minPassword,
		Roles: []string{"viewer", "editor", "admin"}, Add: userRow{Role: "viewer"}}
	switch {
	case d.cfg.Proxy != nil:
		ud.Managed = "proxy"
	case !d.accounts.editable():
		ud.Managed = "config"
	default:
		ud.Editable = true
	}
	if err := d.accounts.reloadError(); err != nil {
		ud.ReloadErr = err.Error()
	}
	if d.accounts.path != "" {
		ud.ModeWarning = groupReadable(d.accounts.path)
	}
	for _, u := range set.list {
		role, _ := ParseRole(u.Role)
		ud.Users = append(ud.Users, userRow{Name: u.Name, Role: role.String(), Apps: u.Apps, AppsText: strings.Join(u.Apps, ", ")})
	}
	slices.SortFunc(ud.Users, func(a, b userRow) int { return strings.Compare(a.Name, b.Name) })
	return ud
}

func (d *Dashboard) usersPage(w http.ResponseWriter, r *http.Request, c *call) {
	v := d.view(c, "Users")
	v.Data = d.usersData()
	q := r.URL.Query()
	if name := q.Get("user"); name != "" {
		what := map[string]string{"add": "added", "update": "changed", "password": "given a new password", "delete": "deleted"}[q.Get("done")]
		if what != "" {
			v.Notice = fmt.Sprintf("User %s %s.", clip(name), what)
		}
		if q.Get("auditerr") != "" {
			v.Error = "The change is made, but the audit log did not record it: see the rule store."
		}
	}
	d.render(w, http.StatusOK, "users", v)
}

// userForm is a change to the users as a form sends it.
type userForm struct {
	name, role, password string
	apps                 []string
	hash                 string // the password's bcrypt hash

}

// readUserForm reads and checks the fields named in fields ("name",
// "role", "apps", "password"); an error names the field.
//
// complexity: a case per user-form field (name, role, apps, password), each with its own check and error
func readUserForm(r *http.Request, fields ...string) (userForm, error) {
	var f userForm
	for _, field := range fields {
		val := r.PostForm.Get(field)
		switch field {
		case "name":
			f.name = strings.TrimSpace(val)
			switch {
			case f.name == "":
				return f, errors.New("name: required")
			case len(f.name) > 64 || !utf8.ValidString(f.name) || strings.IndexFunc(f.name, badNameRune) >= 0:
				return f, errors.New("name: at most 64 characters, printable, no spaces")
			}
		case "role":
			role, err := ParseRole(val)
			if err != nil {
				return f, fmt.Errorf("role: %q: want viewer, editor or admin", clip(val))
			}
			f.role = role.String()
		case "apps":
			for _, a := range strings.Split(val, ",") {
				a = strings.TrimSpace(a)
				if a == "" || slices.Contains(f.apps, a) {
					continue
				}
				if len(a) > 128 || !utf8.ValidString(a) || strings.IndexFunc(a, badNameRune) >= 0 {
					return f, fmt.Errorf("apps: %q: an application name has at most 128 printable characters and no spaces", clip(a))
				}
				if len(f.apps) == maxGrants {
					return f, fmt.Errorf("apps: more than %d applications: grant \"*\" instead", maxGrants)
				}
				f.apps = append(f.apps, a)
			}
		case "password":
			f.password = val
			switch {
			case utf8.RuneCountInString(val) < minPassword:
				return f, fmt.Errorf("password: at least %d characters", minPassword)
			case len(val) > maxPassword:
				return f, fmt.Errorf("password: at most %d bytes", maxPassword)
			}
		}
	}
	return f, nil
}

func badNameRune(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }

// errLastAdmin refuses a change that would leave no admin.
type errLastAdmin struct{ name string }

func (e errLastAdmin) Error() string {
	return fmt.Sprintf("%s is the last admin: make another user an admin first; nothing was changed", e.name)
}

func indexOfUser(us []User, name string) int {
	return slices.IndexFunc(us, func(u User) bool { return u.Name == name })
}

// changeUsers runs one change of the users page: it checks the form, has
// the store apply change against the version the page showed, records the
// change in the audit log and redirects to the users page; a refusal
// renders the users page with the error.
func (d *Dashboard) changeUsers(w http.ResponseWriter, r *http.Request, c *call, action string, fields []string,
	change func(f userForm, us []User) ([]User, string, error)) {
	if !d.accounts.editable() || d.cfg.Proxy != nil {
		d.usersRefused(w, r, c, http.StatusConflict, "the users cannot be changed here: "+managedBy(d), false)
		return
	}
	f, err := readUserForm(r, fields...)
	if err != nil {
		d.usersRefused(w, r, c, http.StatusUnprocessableEntity, "Not saved: "+err.Error(), true)
		return
	}
	if f.password != "" {
		// Hashed before the file is locked: bcrypt takes tens of
		// milliseconds on purpose.
		h, err := bcrypt.GenerateFromPassword([]byte(f.password), hashCost)
		if err != nil {
			d.usersRefused(w, r, c, http.StatusUnprocessableEntity, "Not saved: password: "+err.Error(), true)
			return
		}
		f.hash = string(h)
	}
	var detail string
	err = d.accounts.update(r.PostForm.Get("version"), func(us []User) ([]User, error) {
		next, det, err := change(f, slices.Clone(us))
		detail = det
		return next, err
	})
	var last errLastAdmin
	switch {
	case errors.Is(err, errUsersConflict):
		d.usersRefused(w, r, c, http.StatusConflict, "Not saved: the users changed (in the dashboard or in the file) since this page "+
			"was loaded. The page now shows them as they are; make your change again.", true)
		return
	case errors.Is(err, errUsersStorage):
		d.usersRefused(w, r, c, http.StatusInternalServerError, "Not saved: "+err.Error(), true)
		return
	case errors.As(err, &last):
		d.usersRefused(w, r, c, http.StatusUnprocessableEntity, "Not saved: "+err.Error(), true)
		return
	case err != nil:
		d.usersRefused(w, r, c, http.StatusUnprocessableEntity, "Not saved: "+strings.TrimPrefix(err.Error(), "dashboard: "), true)
		return
	}
	if action == "delete" || action == "password" {
		// The sessions opened with the old password, or by a user now
		// gone, end now (a user re-added later under the same name does
		// not inherit them).
		d.sessions.endUser(f.name)
	}
	target := "/users?done=" + action + "&user=" + url.QueryEscape(f.name)
	if aerr := d.audit(r.Context(), cluster.AuditEntry{User: c.user.name, Action: "user-" + action, Detail: detail}); aerr != nil {
		target += "&auditerr=1"
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
}

func managedBy(d *Dashboard) string {
	if d.cfg.Proxy != nil {
		return "the proxy in front of the dashboard manages them"
	}
	return "they are given in the dashboard's configuration, not in a users file"
}

// usersRefused renders the users page with msg; with keep, the add form
// keeps what was typed in it (never the password).
func (d *Dashboard) usersRefused(w http.ResponseWriter, r *http.Request, c *call, status int, msg string, keep bool) {
	v := d.view(c, "Users")
	ud := d.usersData()
	if keep && r.URL.Path == "/users/add" {
		ud.Add = userRow{Name: clip(r.PostForm.Get("name")), Role: clip(r.PostForm.Get("role")), AppsText: clip(r.PostForm.Get("apps"))}
	}
	v.Data = ud
	v.Error = msg
	d.render(w, status, "users", v)
}

func grants(role string, apps []string) string {
	if role == "admin" {
		return "every application"
	}
	if len(apps) == 0 {
		return "no application"
	}
	return "applications " + strings.Join(apps, ", ")
}

func (d *Dashboard) addUser(w http.ResponseWriter, r *http.Request, c *call) {
	d.changeUsers(w, r, c, "add", []string{"name", "role", "apps", "password"}, func(f userForm, us []User) ([]User, string, error) {
		if indexOfUser(us, f.name) >= 0 {
			return nil, "", fmt.Errorf("name: %s exists already", f.name)
		}
		us = append(us, User{Name: f.name, Hash: f.hash, Role: f.role, Apps: f.apps})
		return us, fmt.Sprintf("added %s: role %s, %s", f.name, f.role, grants(f.role, f.apps)), nil
	})
}

func (d *Dashboard) updateUser(w http.ResponseWriter, r *http.Request, c *call) {
	d.changeUsers(w, r, c, "update", []string{"name", "role", "apps"}, func(f userForm, us []User) ([]User, string, error) {
		i := indexOfUser(us, f.name)
		if i < 0 {
			return nil, "", fmt.Errorf("name: no user %s", f.name)
		}
		old := us[i]
		oldRole, _ := ParseRole(old.Role)
		if oldRole == Admin && f.role != "admin" && newUserSet(us, "").admins() == 1 {
			return nil, "", errLastAdmin{f.name}
		}
		us[i].Role, us[i].Apps = f.role, f.apps
		var changed []string
		if oldRole.String() != f.role {
			changed = append(changed, "role "+oldRole.String()+" -> "+f.role)
		}
		if g0, g1 := grants(oldRole.String(), old.Apps), grants(f.role, f.apps); g0 != g1 || !slices.Equal(old.Apps, f.apps) {
			changed = append(changed, g0+" -> "+g1)
		}
		if len(changed) == 0 {
			changed = append(changed, "nothing changed")
		}
		return us, "changed " + f.name + ": " + strings.Join(changed, "; "), nil
	})
}

func (d *Dashboard) resetPassword(w http.ResponseWriter, r *http.Request, c *call) {
	d.changeUsers(w, r, c, "password", []string{"name", "password"}, func(f userForm, us []User) ([]User, string, error) {
		i := indexOfUser(us, f.name)
		if i < 0 {
			return nil, "", fmt.Errorf("name: no user %s", f.name)
		}
		us[i].Hash = f.hash
		return us, "new password for " + f.name, nil
	})
}

func (d *Dashboard) deleteUser(w http.ResponseWriter, r *http.Request, c *call) {
	// The form's checkbox confirms it (the browser asks for it before
	// sending; a request without it deletes nothing).
	if r.PostForm.Get("confirm") != "yes" {
		d.usersRefused(w, r, c, http.StatusBadRequest, "Not deleted: check \"sure\" beside Delete to confirm the deletion of "+
			clip(r.PostForm.Get("name"))+".", true)
		return
	}
	d.changeUsers(w, r, c, "delete", []string{"name"}, func(f userForm, us []User) ([]User, string, error) {
		i := indexOfUser(us, f.name)
		if i < 0 {
			return nil, "", fmt.Errorf("name: no user %s", f.name)
		}
		role, _ := ParseRole(us[i].Role)
		if role == Admin && newUserSet(us, "").admins() == 1 {
			return nil, "", errLastAdmin{f.name}
		}
		return slices.Delete(us, i, i+1), fmt.Sprintf("deleted %s (role %s)", f.name, role), nil
	})
}
