package dashboard_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"

	"golang.org/x/crypto/bcrypt"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/dashboard"
)

// The dashboard of an engine of the process, with one editor, keeping the
// engine's rules in a directory (a restart loads the version saved last).
// Pages need a session: an anonymous visitor is sent to the login page.
func Example() {
	engine := sluice.New()
	defer engine.Close()
	dir, err := os.MkdirTemp("", "shop-rules") // in production a lasting directory, such as /var/lib/shop/rules
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost) // the users file holds such hashes
	if err != nil {
		log.Fatal(err)
	}
	d, err := dashboard.New(dashboard.Config{
		Engine:   engine,
		App:      "shop",
		RulesDir: dir,
		Users:    []dashboard.User{{Name: "alice", Hash: string(hash), Role: "editor", Apps: []string{"shop"}}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	srv := httptest.NewServer(d) // or http.ListenAndServe("127.0.0.1:8089", d)
	defer srv.Close()

	res, err := http.Get(srv.URL + "/apps/shop")
	if err != nil {
		log.Fatal(err)
	}
	res.Body.Close()
	fmt.Println(res.Request.URL.Path, res.StatusCode, res.Header.Get("X-Frame-Options"))
	// Output: /login 200 DENY
}

func ExampleParseUsers() {
	_, err := dashboard.ParseUsers([]byte(`
users:
  - name: alice
    hash: not-a-hash
    role: editor
    apps: [shop]
`))
	fmt.Println(err)
	// Output: dashboard: user 0 ("alice"): hash: not a bcrypt hash (crypto/bcrypt: hashedSecret too short to be a bcrypted password)
}
