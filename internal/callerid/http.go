package callerid

import (
	"fmt"
	"net/http"
)

// HTTP returns the function that reads a request's caller from the one
// source set: the first value of header, the field of the verified client
// certificate's leaf (see CertField), or fn. It panics when not exactly one
// is set, naming pkg (the adapter) and the fields by name.
func HTTP(pkg, header, cert string, fn func(*http.Request) string) func(*http.Request) string {
	set := 0
	for _, b := range []bool{header != "", cert != "", fn != nil} {
		if b {
			set++
		}
	}
	if set != 1 {
		panic(fmt.Sprintf("%s: a CallerSource sets exactly one of Header, Cert and Func; this one sets %d", pkg, set))
	}
	switch {
	case fn != nil:
		return fn
	case header != "":
		name := http.CanonicalHeaderKey(header)
		return func(r *http.Request) string {
			if v := r.Header[name]; len(v) > 0 {
				return v[0]
			}
			return ""
		}
	}
	field := CertField(cert)
	return func(r *http.Request) string {
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
			return ""
		}
		return field(r.TLS.VerifiedChains[0][0])
	}
}
