package sluicegrpc

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/adapters/grpc/internal/callerid"
)

// CallerSource says where the server interceptors read each call's caller
// identity (sluice.WithCaller), which authority rules and per-caller flow
// rules read. Set exactly one field. A call whose source gives no caller
// enters without one; one whose caller is not an identity an entry may
// carry (more than 256 bytes, not UTF-8, control characters) ends with
// codes.InvalidArgument without entering.
//
// An identity is only as trustworthy as its source: metadata is whatever
// the client sent unless a proxy in front sets it; the peer's certificate
// is what the TLS handshake verified, given server credentials that verify
// client certificates (tls.Config.ClientAuth
// tls.RequireAndVerifyClientCert or VerifyClientCertIfGiven).
type CallerSource struct {
	// Metadata names the incoming metadata key that holds the caller
	// ("x-caller"; keys are lower-case); its first value counts.
	Metadata string
	// Cert takes the caller from the leaf of the peer's verified
	// certificate chain (credentials.TLSInfo; never from a certificate the
	// handshake did not verify): "cn" its subject's common name, "dns" its
	// first DNS name, "uri" its first URI (a SPIFFE ID; this costs an
	// allocation), "email" its first e-mail address.
	Cert string
	// Func returns the caller of a call from its context, "" for none.
	Func func(ctx context.Context) string
}

// WithCaller makes the server interceptors read each call's caller from
// src (see CallerSource). It panics when src sets no field, more than one,
// or an unknown Cert: a mistake of the program, not of a call.
func WithCaller(src CallerSource) Option {
	f := src.reader()
	return func(cf *config) { cf.caller = f }
}

// reader returns the function that reads a call's caller from s.
func (s CallerSource) reader() func(context.Context) string {
	set := 0
	for _, b := range []bool{s.Metadata != "", s.Cert != "", s.Func != nil} {
		if b {
			set++
		}
	}
	if set != 1 {
		panic(fmt.Sprintf("sluicegrpc: a CallerSource sets exactly one of Metadata, Cert and Func; this one sets %d", set))
	}
	switch {
	case s.Func != nil:
		return s.Func
	case s.Metadata != "":
		key := s.Metadata
		return func(ctx context.Context) string {
			if v := metadata.ValueFromIncomingContext(ctx, key); len(v) > 0 {
				return v[0]
			}
			return ""
		}
	}
	field := callerid.CertField(s.Cert)
	return func(ctx context.Context) string {
		p, ok := peer.FromContext(ctx)
		if !ok {
			return ""
		}
		ti, ok := p.AuthInfo.(credentials.TLSInfo)
		if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
			return ""
		}
		return field(ti.State.VerifiedChains[0][0])
	}
}

// errBadCaller ends a call whose caller no entry may carry.
var errBadCaller = status.Error(codes.InvalidArgument, "sluice: invalid caller identity")
