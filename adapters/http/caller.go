package sluicehttp

import (
	"net/http"

	"github.com/sluice-go/sluice/internal/callerid"
)

// CallerSource says where the middleware reads each request's caller
// identity (sluice.WithCaller), which authority rules and per-caller flow
// rules read. Set exactly one field. A request whose source gives no
// caller enters without one; one whose caller is not an identity an entry
// may carry (more than 256 bytes, not UTF-8, control characters) is
// answered 400 Bad Request without entering.
//
// An identity is only as trustworthy as its source. A header is whatever
// the client wrote unless a proxy in front of the service sets it (and
// removes the client's); the verified client certificate is the
// identity the TLS handshake proved, given a server that verifies client
// certificates (tls.Config.ClientAuth tls.RequireAndVerifyClientCert, or
// VerifyClientCertIfGiven).
type CallerSource struct {
	// Header names the request header that holds the caller ("X-Caller").
	Header string
	// Cert takes the caller from the leaf of the client certificate chain
	// the TLS handshake verified (never from a certificate it did not):
	// "cn" its subject's common name, "dns" its first DNS name, "uri" its
	// first URI (a SPIFFE ID), "email" its first e-mail address. A request
	// without a verified certificate has no caller. "uri" costs the
	// request an allocation (the URI's string form); the others none.
	Cert string
	// Func returns the caller of a request, "" for none.
	Func func(r *http.Request) string
}

// WithCaller makes the middleware read each request's caller from src (see
// CallerSource). It panics when src sets no field, more than one, or an
// unknown Cert: a mistake of the program, not of a request.
func WithCaller(src CallerSource) Option {
	f := callerid.HTTP("sluicehttp", src.Header, src.Cert, src.Func)
	return func(c *config) { c.caller = f }
}

// refuseBadCaller answers a request whose caller no entry may carry.
func refuseBadCaller(w http.ResponseWriter) {
	http.Error(w, http.StatusText(http.StatusBadRequest), http.StatusBadRequest)
}
