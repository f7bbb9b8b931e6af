package dashboard

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
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

	mu sync.Mutex
	m  map[string]*session
}

func newSessions(clock sluice.Clock, lifetime time.Duration, max int) *sessions {
	return &sessions{clock: clock, lifetime: lifetime, max: max, m: map[string]*session{}}
}

// randomID returns 32 random bytes, base64url-encoded.
func randomID() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("dashboard: crypto/rand: " + err.Error()) // never fails on supported platforms
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// create starts a session for p, dropping expired sessions, and the one
// closest to expiry when the store is full.
func (s *sessions) create(p *principal) *session {
	now := s.clock.Nanotime()
	ss := &session{id: randomID(), user: p, csrf: randomID(), expires: now + int64(s.lifetime)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) >= s.max {
		var oldest *session
		for id, x := range s.m {
			if x.expires <= now {
				delete(s.m, id)
				continue
			}
			if oldest == nil || x.expires < oldest.expires {
				oldest = x
			}
		}
		if len(s.m) >= s.max && oldest != nil {
			delete(s.m, oldest.id)
		}
	}
	s.m[ss.id] = ss
	return ss
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
		delete(s.m, id)
		return nil
	}
	return ss
}

func (s *sessions) delete(id string) {
	s.mu.Lock()
	delete(s.m, id)
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
