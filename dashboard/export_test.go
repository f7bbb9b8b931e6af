package dashboard

import "github.com/sluice-go/sluice/fleet"

// Routes returns the method and pattern of every endpoint, and whether it
// is public, for the authorization matrix's completeness check.
func (d *Dashboard) Routes() (out [][3]string) {
	for _, rt := range d.routes {
		acc := map[access]string{public: "public", read: "read", write: "write", admin: "admin", signedIn: "signed-in"}[rt.access]
		out = append(out, [3]string{rt.method, rt.pattern, acc})
	}
	return out
}

// Telemetry returns the status of the Engine's frames to the dashboard,
// and false when the dashboard publishes none.
func (d *Dashboard) Telemetry() (fleet.Status, bool) {
	if d.frames == nil {
		return fleet.Status{}, false
	}
	return d.frames.Status(), true
}

// Sessions returns the number of sessions kept.
func (d *Dashboard) Sessions() int { return d.sessions.len() }

// UsersVersion returns the version of the users in force (the hex SHA-256
// of the users file), as the users page sends it back.
func (d *Dashboard) UsersVersion() string { return d.accounts.current().version }
