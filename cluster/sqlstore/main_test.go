package sqlstore

import (
	"context"
	"io"
	"log"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/sluice-go/sluice/cluster/sqlstore/sqltest"
	"go.uber.org/goleak"
)

// TestMain starts each kind of server once for the package (the first test
// that needs it), and stops them after the tests.
func TestMain(m *testing.M) {
	// The driver logs the connections the fault tests cut.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	code := m.Run()
	sqltest.StopAll()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

// kinds are the servers every store test runs on.
var kinds = []string{sqltest.Postgres, sqltest.MariaDB}

// forEach runs f on each kind of server, as subtests named for it.
func forEach(t *testing.T, f func(t *testing.T, srv *sqltest.Server)) {
	for _, k := range kinds {
		t.Run(k, func(t *testing.T) { f(t, sqltest.Shared(t, k)) })
	}
}

// openStore opens a store on a new database of srv, closed by t's cleanup.
func openStore(t testing.TB, srv *sqltest.Server, cfg Config) (*Store, string) {
	t.Helper()
	db := srv.NewDatabase(t)
	url := srv.URL(db, "", "")
	s, err := Open(ctxT(t), url, cfg)
	if err != nil {
		t.Fatalf("Open(%s): %v", Redact(url), err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, url
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// dbName is the database (on PostgreSQL, the schema) of url, for
// sqltest.Server.Exec.
func dbName(srv *sqltest.Server, url string) string {
	if i := strings.LastIndex(url, "search_path="); i >= 0 {
		return url[i+len("search_path="):]
	}
	return url[strings.LastIndex(url, "/")+1:]
}
