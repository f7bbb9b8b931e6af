module github.com/sluice-go/sluice/adapters/echo

go 1.24.0

require (
	github.com/labstack/echo/v4 v4.15.1
	github.com/sluice-go/sluice v0.1.0
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
)
