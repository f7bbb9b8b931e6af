package dashboard

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-go/sluice/sluicetest"
)

// BenchmarkUsersCurrent measures what reading the users in force adds to
// every request (the guard looks the session's user up in them): with a
// users file, a clock reading and an atomic load between the file's
// checks; the check itself (a read and hash of the file) once a second.
func BenchmarkUsersCurrent(b *testing.B) {
	path := filepath.Join(b.TempDir(), "users.yaml")
	data := []byte("users:\n  - {name: ada, hash: '$2a$04$6k9H4p8ua76Czjbx7N4wieizaEc9RD6yyrI.4e0WkG4A0oX63/mPW', role: admin}\n")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		b.Fatal(err)
	}
	for _, file := range []bool{false, true} {
		name := "fixed"
		var s *usersStore
		var err error
		clock := sluicetest.NewManualClock(0)
		if file {
			name = "file"
			s, err = newUsersStore(nil, path, clock)
		} else {
			us, perr := ParseUsers(data)
			if perr != nil {
				b.Fatal(perr)
			}
			s, err = newUsersStore(us, "", clock)
		}
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if s.current().princ["ada"] == nil {
					b.Fatal("no ada")
				}
			}
		})
		b.Run(name+"-parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if s.current().princ["ada"] == nil {
						b.Fatal("no ada")
					}
				}
			})
		})
	}
	b.Run("recheck", func(b *testing.B) {
		clock := sluicetest.NewManualClock(0)
		s, err := newUsersStore(nil, path, clock)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			clock.Advance(usersRecheck)
			if s.current().princ["ada"] == nil {
				b.Fatal("no ada")
			}
		}
	})
}
