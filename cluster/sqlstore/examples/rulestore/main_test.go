package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/sluice-go/sluice/cluster/sqlstore/sqltest"
)

func TestMain(m *testing.M) {
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

// TestRun runs the example on a PostgreSQL and on a MariaDB the test
// starts, and checks that both engines ran both versions and reported the
// second.
func TestRun(t *testing.T) {
	for _, kind := range []string{sqltest.Postgres, sqltest.MariaDB} {
		t.Run(kind, func(t *testing.T) {
			srv := sqltest.Shared(t, kind)
			var out bytes.Buffer
			if err := run(&out, srv.URL(srv.NewDatabase(t), "", "")); err != nil {
				t.Fatal(err)
			}
			t.Log("\n" + out.String())
			for _, want := range []string{
				"version saved by ops-1", "shop-1: GET /orders at 100/s", "shop-2: GET /orders at 100/s",
				"version saved by ops-2", "shop-2: POST /orders at 20/s",
				"report: shop-1 runs the version in force", "report: shop-2 runs the version in force",
				"resource GET /orders: created by ops-1, last changed by ops-2", "resource POST /orders: created by ops-2, last changed by ops-2",
			} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q", want)
				}
			}
		})
	}
}
