package sqlstore

import (
	"testing"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/cluster/fleettest"
	"github.com/sluice-go/sluice/cluster/sqlstore/sqltest"
)

// tables are the store's tables, emptied between the suite's subtests.
var tables = []string{"sluice_rule_apps", "sluice_rule_versions", "sluice_rule_buckets", "sluice_rule_reports", "sluice_audit"}

// TestConformance runs the cluster.RuleStore contract suite on each
// server: one database and one store, its tables emptied for each subtest
// (a database and a store each take a second on a busy host).
func TestConformance(t *testing.T) {
	forEach(t, func(t *testing.T, srv *sqltest.Server) {
		s, url := openStore(t, srv, Config{})
		db := dbName(srv, url)
		fleettest.RuleStore(t, func(t *testing.T) cluster.RuleStore {
			for _, tb := range tables {
				srv.Exec(t, db, "DELETE FROM "+tb)
			}
			return s
		})
	})
}
