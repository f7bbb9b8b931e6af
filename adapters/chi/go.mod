module github.com/sluice-go/sluice/adapters/chi

go 1.24

require (
	github.com/go-chi/chi/v5 v5.5.0
	github.com/sluice-go/sluice v0.1.0
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
)
