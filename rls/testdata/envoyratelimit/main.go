// Command envoyratelimit is envoyproxy/ratelimit, taken from the module
// proxy at the version go.mod requires, for sluice-rls's differential test
// (TestDifferential in the package above, make rls-differential): its
// imports keep go.mod and go.sum complete for
// go build github.com/envoyproxy/ratelimit/src/service_cmd.
package main

import _ "github.com/envoyproxy/ratelimit/src/service_cmd/runner"

func main() {}
