package sluiceconnect

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"

	"connectrpc.com/connect"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/connect/internal/callerid"
)

// CallerSource says where the interceptor reads each call's caller
// identity (sluice.WithCaller), which authority rules and per-caller flow
// rules read. Set exactly one field. A call whose source gives no caller
// enters without one; a caller an authority rule refuses gets
// CodePermissionDenied (DefaultCode), and one that is not an identity an
// entry may carry (more than 256 bytes, not UTF-8, control characters)
// CodeInvalidArgument without entering.
//
// An identity is only as trustworthy as its source. A header is whatever
// the client wrote unless a proxy in front of the service sets it (and
// removes the client's); the verified client certificate is the identity
// the TLS handshake proved, given a server that verifies client
// certificates (tls.Config.ClientAuth tls.RequireAndVerifyClientCert, or
// VerifyClientCertIfGiven).
type CallerSource struct {
	// Header names the request header that holds the caller ("X-Caller").
	// On a client, it is the header the caller set on a unary request (a
	// stream has none when its entry is asked).
	Header string
	// Cert takes a handler's caller from the leaf of the peer's client
	// certificate chain the TLS handshake verified: "cn" its subject's
	// common name, "dns" its first DNS name, "uri" its first URI (a SPIFFE
	// ID), "email" its first e-mail address. connect does not give an
	// interceptor the connection's TLS state: serve the handlers through
	// CertHandler, which keeps it in each request's context. A call
	// without a verified certificate, or not served so, has no caller.
	Cert string
	// Func returns the caller of a call, "" for none.
	Func func(ctx context.Context, c Call) string
}

// WithCaller makes the interceptor read each call's caller from src (see
// CallerSource). It panics when src sets no field, more than one, or an
// unknown Cert: a mistake of the program, not of a call.
func WithCaller(src CallerSource) Option {
	f := callerFunc(src)
	return func(cf *config) { cf.caller = f }
}

func callerFunc(src CallerSource) func(ctx context.Context, c Call) string {
	set := 0
	for _, b := range []bool{src.Header != "", src.Cert != "", src.Func != nil} {
		if b {
			set++
		}
	}
	if set != 1 {
		panic(fmt.Sprintf("sluiceconnect: a CallerSource sets exactly one of Header, Cert and Func; this one sets %d", set))
	}
	switch {
	case src.Func != nil:
		return src.Func
	case src.Header != "":
		name := http.CanonicalHeaderKey(src.Header)
		return func(_ context.Context, c Call) string {
			if v := c.Header[name]; len(v) > 0 {
				return v[0]
			}
			return ""
		}
	}
	field := callerid.CertField(src.Cert)
	return func(ctx context.Context, _ Call) string {
		st, _ := ctx.Value(tlsKey{}).(*tls.ConnectionState)
		if st == nil || len(st.VerifiedChains) == 0 || len(st.VerifiedChains[0]) == 0 {
			return ""
		}
		return field(st.VerifiedChains[0][0])
	}
}

// tlsKey is the context key of a request's TLS connection state.
type tlsKey struct{}

// CertHandler returns h (connect handlers, or a mux of them) with each
// request's TLS connection state kept in its context, where
// CallerSource.Cert reads the verified client certificate. A request over
// plain HTTP passes unchanged.
func CertHandler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil {
			r = r.WithContext(context.WithValue(r.Context(), tlsKey{}, r.TLS))
		}
		h.ServeHTTP(w, r)
	})
}

// errBadCaller is the message of a call whose caller no entry may carry.
var errBadCaller = errors.New("sluiceconnect: invalid caller")

// notEntered returns the error of a call whose Entry returned err: the
// refusal's, CodeInvalidArgument for a caller no entry may carry, and nil
// for any other (fail open: see the package doc).
func (cf *config) notEntered(ctx context.Context, spec connect.Spec, err error) error {
	switch {
	case errors.Is(err, sluice.ErrBlocked):
		return cf.blocked(ctx, spec, err)
	case errors.Is(err, sluice.ErrBadCaller):
		return connect.NewError(connect.CodeInvalidArgument, errBadCaller)
	}
	return nil
}
