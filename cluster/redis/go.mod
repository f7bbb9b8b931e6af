module github.com/sluice-go/sluice/cluster/redis

go 1.24

replace github.com/sluice-go/sluice => ../..

require (
	github.com/redis/go-redis/v9 v9.22.0
	github.com/sluice-go/sluice v0.0.0
	go.uber.org/goleak v1.3.0
	golang.org/x/time v0.12.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.30.0 // indirect
)
