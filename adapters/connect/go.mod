module github.com/sluice-go/sluice/adapters/connect

go 1.24.0

require (
	connectrpc.com/connect v1.19.2
	github.com/sluice-go/sluice v0.1.0
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20250707201910-8d1bb00bc6a7
	google.golang.org/protobuf v1.36.9
)
