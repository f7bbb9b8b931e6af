// Command sluice-dashboard serves the sluice dashboard for a fleet whose
// rules, reports, audit log and telemetry live in Redis (the keys of
// github.com/sluice-go/sluice/cluster/redis).
//
//	sluice-dashboard -redis 127.0.0.1:6379 -users users.yaml
//
// listens on 127.0.0.1:8089 by default. With -rules (or $SLUICE_RULES_URL),
// the rules, their history, the instances' reports and the audit log are
// in PostgreSQL or MySQL (github.com/sluice-go/sluice/cluster/sqlstore),
// and Redis carries only the telemetry and heartbeats (-redis "" for none):
//
//	SLUICE_RULES_URL=postgres://sluice:pw@db:5432/ops sluice-dashboard -users users.yaml
//
// Behind an authenticating proxy,
// -proxy-from names the proxy's addresses and the users file is optional:
//
//	sluice-dashboard -proxy-from 10.0.0.5/32 -secure-cookies
//
// The users file is also where the users page writes: admins add users,
// change roles and grants, set passwords and delete users there, and edits
// made to the file by hand are read within a second.
//
// -hash reads a password from standard input (without echoing it when
// that is a terminal) and prints its bcrypt hash, for the users file; it
// refuses a password shorter than 12 characters, as the users page does.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
	"golang.org/x/crypto/bcrypt"
	"golang.org/x/term"

	sluiceredis "github.com/sluice-go/sluice/cluster/redis"
	"github.com/sluice-go/sluice/cluster/sqlstore"
	"github.com/sluice-go/sluice/dashboard"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, nil); err != nil {
		fmt.Fprintln(os.Stderr, "sluice-dashboard:", err)
		os.Exit(2)
	}
}

// run runs the command with args until ctx ends or a signal stops it;
// ready, when not nil, receives the address listened on.
func run(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer, ready chan<- string) error {
	fs := flag.NewFlagSet("sluice-dashboard", flag.ContinueOnError)
	addr := fs.String("redis", "127.0.0.1:6379", "Redis address (host:port); empty, with -rules, for no Redis (no telemetry nor heartbeats)")
	rulesURL := fs.String("rules", os.Getenv("SLUICE_RULES_URL"), "rule store URL, postgres://… or mysql://… (default $SLUICE_RULES_URL); empty: the rules are in Redis")
	redisUser := fs.String("redis-user", "", "Redis ACL user (password from $SLUICE_REDIS_PASSWORD)")
	prefix := fs.String("prefix", sluiceredis.DefaultPrefix, "prefix of the Redis keys, as the instances use")
	usersFile := fs.String("users", "", "users file (YAML: name, hash, role, apps); admins change it from the users page")
	listen := fs.String("listen", "127.0.0.1:8089", "address to listen on")
	apps := fs.String("apps", "", "applications to show besides those with rules (comma-separated)")
	proxyFrom := fs.String("proxy-from", "", "trusted-header mode: the proxy's addresses (comma-separated prefixes, 10.0.0.5/32)")
	secure := fs.Bool("secure-cookies", false, "mark cookies Secure on plain HTTP (TLS ends at a proxy)")
	certFile := fs.String("tls-cert", "", "TLS certificate file (with -tls-key)")
	keyFile := fs.String("tls-key", "", "TLS key file")
	session := fs.Duration("session", 8*time.Hour, "session lifetime")
	hash := fs.Bool("hash", false, "read a password from standard input, print its bcrypt hash and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *hash {
		return hashPassword(stdin, stdout)
	}

	cfg := dashboard.Config{SessionLifetime: *session, SecureCookies: *secure}
	if *usersFile != "" {
		// Checked before connecting; the dashboard then keeps the file:
		// admins change users on the users page, and hand edits are read
		// within a second.
		if _, err := dashboard.LoadUsers(*usersFile); err != nil {
			return err
		}
		cfg.UsersFile = *usersFile
	}
	if *proxyFrom != "" {
		p := &dashboard.TrustedProxy{}
		for _, s := range strings.Split(*proxyFrom, ",") {
			pfx, err := netip.ParsePrefix(strings.TrimSpace(s))
			if err != nil {
				return fmt.Errorf("-proxy-from: %w", err)
			}
			p.From = append(p.From, pfx)
		}
		cfg.Proxy = p
	}
	for _, a := range strings.Split(*apps, ",") {
		if a = strings.TrimSpace(a); a != "" {
			cfg.Apps = append(cfg.Apps, a)
		}
	}

	where := "Redis " + *addr
	if *rulesURL != "" {
		rs, err := openSQLRules(ctx, *rulesURL)
		if err != nil {
			return err
		}
		defer rs.Close()
		cfg.Rules, where = sqlRules{rs}, "rules "+sqlstore.Redact(*rulesURL)
		if *addr != "" {
			where += ", telemetry Redis " + *addr
		}
	} else if *addr == "" {
		return errors.New("-redis is empty and -rules is not set: the dashboard has no rule store")
	}
	if *addr != "" {
		rdb := redis.NewClient(&redis.Options{Addr: *addr, Username: *redisUser, Password: os.Getenv("SLUICE_REDIS_PASSWORD"),
			DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second, ContextTimeoutEnabled: true})
		defer rdb.Close()
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := rdb.Ping(pctx).Err()
		cancel()
		if err != nil {
			return fmt.Errorf("redis at %s: %w", *addr, err)
		}
		if cfg.Rules == nil {
			cfg.Rules = sluiceredis.NewRuleStore(rdb, sluiceredis.RuleStoreConfig{Prefix: *prefix})
		}
		cfg.Telemetry = sluiceredis.NewTelemetry(rdb, sluiceredis.TelemetryConfig{Prefix: *prefix})
		cfg.Members = sluiceredis.New(rdb, sluiceredis.WithPrefix(*prefix))
	}
	d, err := dashboard.New(cfg)
	if err != nil {
		return err
	}
	defer d.Close()

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: d, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute,
		WriteTimeout: time.Minute, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	scheme := "http"
	if *certFile != "" {
		scheme = "https"
	}
	fmt.Fprintf(stdout, "sluice dashboard on %s://%s (%s, prefix %q)\n", scheme, ln.Addr(), where, *prefix)
	if ready != nil {
		ready <- ln.Addr().String()
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() {
		if *certFile != "" {
			errc <- srv.ServeTLS(ln, *certFile, *keyFile)
		} else {
			errc <- srv.Serve(ln)
		}
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	<-errc
	log.SetOutput(io.Discard)
	return err
}

// minPassword is the shortest password -hash takes: the users page's
// minimum.
const minPassword = 12

// hashPassword reads a password from stdin and prints its bcrypt hash. On
// a terminal it asks for it on standard error and does not echo it. The
// password is never printed, in errors neither.
func hashPassword(stdin io.Reader, stdout io.Writer) error {
	var pw []byte
	if f, ok := stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(os.Stderr, "Password (not echoed): ")
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(os.Stderr)
		if err != nil {
			return fmt.Errorf("-hash: reading the password: %w", err)
		}
		pw = b
	} else {
		line, err := bufio.NewReader(io.LimitReader(stdin, 4096)).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("-hash: reading the password: %w", err)
		}
		pw = []byte(strings.TrimRight(line, "\r\n"))
	}
	switch n := utf8.RuneCount(pw); {
	case n < minPassword:
		return fmt.Errorf("-hash: the password has %d characters: at least %d are required", n, minPassword)
	case len(pw) > 72:
		return fmt.Errorf("-hash: the password has %d bytes: bcrypt reads at most 72", len(pw))
	}
	h, err := bcrypt.GenerateFromPassword(pw, bcrypt.DefaultCost)
	if err != nil {
		return fmt.Errorf("-hash: %w", err)
	}
	fmt.Fprintln(stdout, string(h))
	return nil
}
