// Package dashboard is sluice's web interface: an http.Handler showing the
// applications of a fleet (or one engine of the process), their instances
// and the rule version each runs, a table of every resource (searched,
// sorted and paged on the server, per instance on demand) and live charts
// of the resources chosen (passed, blocked by reason, response time, in
// flight, with the rules' limits and the rule versions marked), circuit
// breakers, system protection and cluster mode; the rules of every kind,
// edited as a rule document with validation, a confirmation of what
// changes, conflict detection and the rollout followed; their history with
// rollback; and an audit log that names the rules each save changed.
//
// Data come from a cluster.RuleStore (rules, history, reports, audit log)
// and a cluster.Telemetry (one frame per instance and second). With
// Config.Engine the dashboard shows an engine of its own process: its
// rules are kept in a directory (Config.RulesDir, a cluster/filestore) or
// another store, so that the version saved last is loaded again after a
// restart; each save goes into the engine, all or nothing, before it is
// written; and the engine publishes its frames to the dashboard
// (fleet.Join).
//
// Users log in with a password (bcrypt hashes from a users file, see
// ParseUsers) or are named by an authenticating proxy (TrustedProxy). Each
// has a Role (Viewer, Editor, Admin) and the applications granted. Given a
// users file (Config.UsersFile), admins manage the users on the users page
// (add, change role and grants, set a password, delete), the dashboard
// writes the file atomically and reads hand edits within a second, and
// every request is authorized against the users in force.
// Authorization is checked on the server for every request; sessions live
// on the server, bounded (per user too) and expiring; every write, the
// login included, is refused from a page of another origin and needs the
// session's CSRF token; login attempts are limited within the last
// minute, per address, per address and name (with a backoff) and per
// name, so that an attacker does not lock the owner out;
// refused logins are counted apart from the audit log; pages carry a
// Content-Security-Policy without inline script, and every value from
// traffic is escaped.
//
// The pages are server-rendered html/template with one embedded script and
// stylesheet: no build step, nothing fetched from elsewhere. See
// docs/design/dashboard.md in the repository for deployment and the security
// measures with their tests.
package dashboard
