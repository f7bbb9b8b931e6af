// Package callerid reads a caller identity from a verified client
// certificate, for the adapters' caller sources. The other adapter modules
// hold generated copies of its files (go run ./internal/cmd/modules copies;
// the table is internal/cmd/modules/shared.go).
package callerid

import (
	"crypto/x509"
	"fmt"
)

// CertField returns the function that reads the field of a certificate
// named by field: "cn" the subject's common name, "dns" the first DNS
// name, "uri" the first URI (its string form, which allocates), "email"
// the first e-mail address; "" when the certificate has none. It panics
// on any other field: the adapters' options call it when configured.
func CertField(field string) func(c *x509.Certificate) string {
	switch field {
	case "cn":
		return func(c *x509.Certificate) string { return c.Subject.CommonName }
	case "dns":
		return func(c *x509.Certificate) string { return first(c.DNSNames) }
	case "email":
		return func(c *x509.Certificate) string { return first(c.EmailAddresses) }
	case "uri":
		return func(c *x509.Certificate) string {
			if len(c.URIs) == 0 {
				return ""
			}
			return c.URIs[0].String()
		}
	}
	panic(fmt.Sprintf("unknown certificate field %q for a caller (want cn, dns, uri or email)", field))
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}
