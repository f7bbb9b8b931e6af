package ruledef

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// MaxCallerBytes is the longest caller identity (sluice.WithCaller, a
// caller named in a rule): room for a service name, a DNS name (253
// bytes) or a certificate's common name (64), and the bound on what a
// rule keeps per caller it tracks.
const MaxCallerBytes = 256

// MaxCallers bounds the callers one rule lists.
const MaxCallers = 1 << 16

// CallerProblem says what is wrong with caller, a non-empty identity, or
// returns "" when an entry may carry it: at most MaxCallerBytes of valid
// UTF-8 without control characters (C0, DEL, C1).
func CallerProblem(caller string) string {
	if len(caller) > MaxCallerBytes {
		return fmt.Sprintf("%d bytes, more than %d", len(caller), MaxCallerBytes)
	}
	for i := 0; i < len(caller); {
		b := caller[i]
		if b < utf8.RuneSelf {
			if b < 0x20 || b == 0x7f {
				return fmt.Sprintf("control character %#x at byte %d", b, i)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(caller[i:])
		if r == utf8.RuneError && n == 1 {
			return fmt.Sprintf("not valid UTF-8 at byte %d", i)
		}
		if unicode.IsControl(r) {
			return fmt.Sprintf("control character %U at byte %d", r, i)
		}
		i += n
	}
	return ""
}
