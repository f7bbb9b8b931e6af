module github.com/sluice-go/sluice/adapters/fiber

go 1.24

require (
	github.com/gofiber/fiber/v2 v2.52.15
	github.com/sluice-go/sluice v0.1.0
	github.com/stretchr/testify v1.12.1
	github.com/valyala/fasthttp v1.51.0
	go.uber.org/goleak v1.3.0
)
