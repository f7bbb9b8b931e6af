package dashboard_test

import (
	"fmt"
	"io"
	"log"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"

	"golang.org/x/crypto/bcrypt"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/dashboard"
)

// A dashboard keeping its users in a users file: an admin adds a viewer
// from the users page (here with plain HTTP requests, as the page's form
// sends them), and the file holds the new user, with a bcrypt hash of the
// password.
func ExampleConfig_usersFile() {
	dir, err := os.MkdirTemp("", "sluice-users")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "users.yaml")
	hash, _ := bcrypt.GenerateFromPassword([]byte("the admin's password"), bcrypt.MinCost)
	if err := os.WriteFile(path, []byte("users:\n  - {name: ada, hash: '"+string(hash)+"', role: admin}\n"), 0o600); err != nil {
		log.Fatal(err)
	}
	engine := sluice.New()
	defer engine.Close()
	d, err := dashboard.New(dashboard.Config{Engine: engine, App: "shop", RulesDir: filepath.Join(dir, "rules"), UsersFile: path})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	srv := httptest.NewServer(d)
	defer srv.Close()

	jar, _ := cookiejar.New(nil)
	hc := srv.Client() // its connections end with srv
	hc.Jar = jar
	field := func(page, name string) string {
		res, err := hc.Get(srv.URL + page)
		if err != nil {
			log.Fatal(err)
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		if err != nil {
			log.Fatal(err)
		}
		m := regexp.MustCompile(`name="` + name + `" value="([^"]+)"`).FindSubmatch(body)
		if m == nil {
			log.Fatalf("no %s on %s", name, page)
		}
		return string(m[1])
	}
	res, err := hc.PostForm(srv.URL+"/login", url.Values{"csrf": {field("/login", "csrf")}, "name": {"ada"}, "password": {"the admin's password"}})
	if err != nil {
		log.Fatal(err)
	}
	res.Body.Close()
	res, err = hc.PostForm(srv.URL+"/users/add", url.Values{
		"csrf": {field("/users", "csrf")}, "version": {field("/users", "version")},
		"name": {"viv"}, "role": {"viewer"}, "apps": {"shop"}, "password": {"at least twelve characters"},
	})
	if err != nil {
		log.Fatal(err)
	}
	res.Body.Close()
	fmt.Println(res.Request.URL.Path, res.Request.URL.Query().Get("done"), res.StatusCode)

	users, err := dashboard.LoadUsers(path)
	if err != nil {
		log.Fatal(err)
	}
	for _, u := range users {
		fmt.Println(u.Name, u.Role, u.Apps, bcrypt.CompareHashAndPassword([]byte(u.Hash), []byte("at least twelve characters")) == nil)
	}
	// Output:
	// /users add 200
	// ada admin [] false
	// viv viewer [shop] true
}
