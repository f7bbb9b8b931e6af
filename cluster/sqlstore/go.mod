module github.com/sluice-go/sluice/cluster/sqlstore

go 1.24

require (
	github.com/go-sql-driver/mysql v1.10.1
	github.com/jackc/pgx/v5 v5.8.0
	github.com/sluice-go/sluice v0.1.0
	go.uber.org/goleak v1.3.0
)
