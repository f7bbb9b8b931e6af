package sluice

import (
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/sluice-go/sluice/internal/entry"
)

// optCaller is the option kind of WithCaller.
const optCaller = optArg + 2

// maxCallerBytes is the longest caller identity an entry may carry: room
// for a service name, a host name (253 bytes) or a certificate's common
// name (64), and a bound on what a rule's caller state keeps per caller.
const maxCallerBytes = 256

// WithCaller names the application making the call (Sentinel's origin):
// authority rules (rules.Authority) allow or refuse it, and flow rules with
// a Caller count it. The adapters take it from a source you configure (a
// header, the verified TLS client certificate, gRPC metadata or a function
// of the request); an identity is only as trustworthy as that source, and
// one a client writes itself (a header a proxy does not overwrite) proves
// nothing.
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
	if len(caller) > maxCallerBytes {
		return fmt.Errorf("%w: %d bytes, more than %d", ErrBadCaller, len(caller), maxCallerBytes)
	}
	for i := 0; i < len(caller); {
		b := caller[i]
		if b < utf8.RuneSelf {
			if b < 0x20 || b == 0x7f {
				return fmt.Errorf("%w: control character %#x at byte %d", ErrBadCaller, b, i)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(caller[i:])
		if r == utf8.RuneError && n == 1 {
			return fmt.Errorf("%w: not valid UTF-8 at byte %d", ErrBadCaller, i)
		}
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: control character %U at byte %d", ErrBadCaller, r, i)
		}
		i += n
	}
	return nil
}
