module github.com/sluice-go/sluice/examples/benchcompare

go 1.24

require (
	github.com/sluice-go/sluice v0.0.0
	go.uber.org/ratelimit v0.3.1
	golang.org/x/time v0.14.0
)

replace github.com/sluice-go/sluice => ../..
