package dashboard

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"slices"
	"sync"
	"time"

	"github.com/sluice-go/sluice"
)

// session is one logged-in user's state, kept on the server; the client
// holds only its random ID.
type session struct {
	id      string
	user    *principal
	csrf    string
	expires int64 // on the dashboard's clock, nanoseconds
}

// principal is who makes a request.
type principal struct {
	name string
	role Role
	apps map[string]bool // "*" grants every application
}

// can reports whether p may see app (write false) or change its rules
// (write true).
func (p *principal) can(app string, write bool) bool {
	if p == nil {
		return false
	}
	if p.role == Admin {
		return true
	}
	if write && p.role < Editor {
		return false
	}
	return p.apps["*"] || p.apps[app]
}

// sessions is a bounded store of sessions with expiry. It is safe for
// concurrent use.
type sessions struct {
	clock    sluice.Clock
	lifetime time.Duration
	max      int
	perUser  int

	mu     sync.Mutex
	m      map[string]*session
	byUser map[string][]*session // each user's sessions, oldest first
}

func newSessions(clock sluice.Clock, lifetime time.Duration, max int) *sessions {
	return &sessions{clock: clock, lifetime: lifetime, max: max, perUser: maxSessionsPerUser,
		m: map[string]*session{}, byUser: map[string][]*session{}}
}

// randomID returns 32 random bytes, base64url-encoded.
func randomID() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("dashboard: crypto/rand: " + err.Error()) // never fails on supported platforms
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// maxSessionsPerUser bounds the sessions of one user: a user's new
// session beyond it ends that user's oldest, so that one user, however
// many sessions it opens, ends no other user's.
const maxSessionsPerUser = 16

// create starts a session for p, ending p's oldest session when p has
// maxSessionsPerUser; when the store is full, it drops expired sessions,
// and the one closest to expiry when none has expired.
func (s *sessions) create(p *principal) *session {
	now := s.clock.Nanotime()
	ss := &session{id: randomID(), user: p, csrf: randomID(), expires: now + int64(s.lifetime)}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range slices.Clone(s.byUser[p.name]) {
		if x.expires <= now {
			s.deleteLocked(x.id)
		}
	}
	// Oldest first: a user's sessions are appended as they are made.
	for mine := s.byUser[p.name]; len(mine) >= s.perUser; mine = s.byUser[p.name] {
		s.deleteLocked(mine[0].id)
	}
	if len(s.m) >= s.max {
		var oldest *session
		for id, x := range s.m {
			if x.expires <= now {
				s.deleteLocked(id)
				continue
			}
			if oldest == nil || x.expires < oldest.expires {
				oldest = x
			}
		}
		if len(s.m) >= s.max && oldest != nil {
			s.deleteLocked(oldest.id)
		}
	}
	s.m[ss.id] = ss
	s.byUser[p.name] = append(s.byUser[p.name], ss)
	return ss
}

// deleteLocked ends the session id.
func (s *sessions) deleteLocked(id string) {
	ss := s.m[id]
	if ss == nil {
		return
	}
	delete(s.m, id)
	name := ss.user.name
	mine := slices.DeleteFunc(s.byUser[name], func(x *session) bool { return x == ss })
	if len(mine) == 0 {
		delete(s.byUser, name)
	} else {
		s.byUser[name] = mine
	}
}

// get returns the unexpired session id, or nil.
func (s *sessions) get(id string) *session {
	if id == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.m[id]
	if ss == nil {
		return nil
	}
	if ss.expires <= s.clock.Nanotime() {
		s.deleteLocked(id)
		return nil
	}
	return ss
}

func (s *sessions) delete(id string) {
	s.mu.Lock()
	s.deleteLocked(id)
	s.mu.Unlock()
}

func (s *sessions) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// equalToken compares two tokens in constant time (for tokens of the same
// length).
func equalToken(a, b string) bool {
	return a != "" && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}
