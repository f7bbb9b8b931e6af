// Package copypass copies a sluice.Pass, which go vet must report
// (TestPassCopyIsReportedByVet).
package copypass

import "github.com/sluice-go/sluice"

// Copy exits a pass and a copy of it.
func Copy() {
	p, err := sluice.Entry("r")
	if err != nil {
		return
	}
	cp := *p
	p.Exit()
	cp.Exit()
}
