module github.com/sluice-go/sluice

go 1.24

require (
	github.com/shirou/gopsutil/v3 v3.24.5 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5
)
