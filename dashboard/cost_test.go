package dashboard

import "golang.org/x/crypto/bcrypt"

// The hashes the dashboard makes in the tests (new passwords, the dummy
// compared against for an unknown name) cost what the test users' hashes
// cost: bcrypt.DefaultCost takes seconds of CPU a hash under -race, and the
// tests add users, change passwords and log in as unknown names many times.
func init() { hashCost = bcrypt.MinCost }
