package sluice

import (
	"fmt"

	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/ruledef"
)

// optCaller is the option kind of WithCaller.
const optCaller = optArg + 2

// WithCaller names the application making the call (Sentinel's origin):
// authority rules (rules.Authority) allow or refuse it, and flow rules with
// a Caller count it. The adapters take it from a source you configure (a
// header, the verified TLS client certificate, gRPC metadata or a function
// of the request); an identity is only as trustworthy as that source, and
// one a client writes itself (a header no proxy in front overwrites)
// proves nothing.
//
// caller must be at most 256 bytes of valid UTF-8 without control
// characters; Entry refuses any other with ErrBadCaller, counting nothing.
// The empty caller is no caller, as if the option were not given. It never
// allocates: caller is read during Entry and not kept beyond the entry.
func WithCaller(caller string) EntryOption {
	return EntryOption{kind: optCaller, arg: entry.Arg{Value: entry.Value{Str: caller}}}
}

// checkCaller returns the error Entry returns for caller, a non-empty
// identity, or nil when it is one an entry may carry (see WithCaller).
func checkCaller(caller string) error {
	if p := ruledef.CallerProblem(caller); p != "" {
		return fmt.Errorf("%w: %s", ErrBadCaller, p)
	}
	return nil
}
