// Package sqltest runs real PostgreSQL and MariaDB (or MySQL) servers for
// tests, as redistest runs Redis: each server in a temporary folder, on a
// free loopback port, with its unix socket in that folder. A test package
// starts each kind once (Postgres, MariaDB: the first call starts it, later
// calls share it) and stops them in TestMain (StopAll); each test gets a
// database of its own (NewDatabase). A server can also be started apart
// (Start), to be killed and restarted by one test.
//
// PostgreSQL refuses to run as root: run by root, the server runs as the
// "postgres" user (the one Debian's package creates) or, without it,
// "nobody". On Linux the kernel kills a server whose test binary died.
//
// When the binaries are missing the test is skipped with a message saying
// how to install them, except under CI=true, where it fails.
package sqltest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

// Kinds of server.
const (
	Postgres = "postgres"
	MariaDB  = "mysql"
)

// Password is the password of the servers' administrator ("sluice").
const Password = "sluice-test-pw"

const startTimeout = 60 * time.Second

// Server is one database server process.
type Server struct {
	Kind string
	// Dir holds the data and the unix socket.
	Dir  string
	Port int

	bin  string
	args []string
	cred *syscall.Credential
	cmd  *exec.Cmd
	done chan struct{}
	log  string

	mu      sync.Mutex
	handles map[string]*sql.DB // Exec's, by database
}

var (
	mu     sync.Mutex
	shared = map[string]*Server{}
	failed = map[string]error{}
	dbSeq  atomic.Int64
)

// Shared returns the package's server of kind (Postgres or MariaDB),
// started by the first call. StopAll stops it.
func Shared(tb testing.TB, kind string) *Server {
	tb.Helper()
	mu.Lock()
	defer mu.Unlock()
	if s := shared[kind]; s != nil {
		return s
	}
	if err := failed[kind]; err != nil {
		tb.Fatalf("sqltest: %s did not start: %v", kind, err)
	}
	need(tb, kind)
	s, err := start(kind)
	if err != nil {
		failed[kind] = err
		tb.Fatalf("sqltest: starting %s: %v", kind, err)
	}
	shared[kind] = s
	return s
}

// StopAll stops the servers Shared started; TestMain calls it after the
// tests ran.
func StopAll() {
	mu.Lock()
	defer mu.Unlock()
	for k, s := range shared {
		s.Stop()
		_ = os.RemoveAll(s.Dir)
		delete(shared, k)
	}
}

// Start starts a server of kind for tb alone, stopped and removed by tb's
// cleanup.
func Start(tb testing.TB, kind string) *Server {
	tb.Helper()
	need(tb, kind)
	s, err := start(kind)
	if err != nil {
		tb.Fatalf("sqltest: starting %s: %v", kind, err)
	}
	tb.Cleanup(func() { s.Stop(); _ = os.RemoveAll(s.Dir) })
	return s
}

// binaries returns the paths of the programs kind needs, or an error
// naming the missing one.
func binaries(kind string) (initdb, server string, err error) {
	look := func(names ...string) (string, error) {
		for _, n := range names {
			if p, err := exec.LookPath(n); err == nil {
				return p, nil
			}
			if matches, _ := filepath.Glob(n); len(matches) > 0 {
				return matches[len(matches)-1], nil
			}
		}
		return "", fmt.Errorf("%s not found", names[0])
	}
	if kind == Postgres {
		if initdb, err = look("initdb", "/usr/lib/postgresql/*/bin/initdb"); err != nil {
			return "", "", err
		}
		server, err = look("postgres", "/usr/lib/postgresql/*/bin/postgres")
		return initdb, server, err
	}
	if initdb, err = look("mariadb-install-db", "mysql_install_db", "/usr/bin/mariadb-install-db"); err != nil {
		return "", "", err
	}
	server, err = look("mariadbd", "mysqld", "/usr/sbin/mariadbd", "/usr/sbin/mysqld")
	return initdb, server, err
}

// need skips tb (or fails it under CI=true) when kind's binaries are
// missing.
func need(tb testing.TB, kind string) {
	tb.Helper()
	if _, _, err := binaries(kind); err != nil {
		msg := fmt.Sprintf("sqltest: %v: install PostgreSQL and MariaDB to run these tests (Debian/Ubuntu: apt-get install postgresql mariadb-server; macOS: brew install postgresql mariadb)", err)
		if os.Getenv("CI") == "true" {
			tb.Fatal(msg + " (CI=true: failing instead of skipping)")
		}
		tb.Skip(msg)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// runAs returns the credential a server of kind runs with: PostgreSQL's,
// run by root, is an unprivileged user's.
func runAs(kind string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 || kind != Postgres {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, errors.New("running as root and no postgres or nobody user to run PostgreSQL as: create one (useradd postgres)")
}

// complexity: initialises the data folder of either kind, then starts the server
func start(kind string) (*Server, error) {
	initdb, bin, err := binaries(kind)
	if err != nil {
		return nil, err
	}
	cred, err := runAs(kind)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sqltest-"+kind+"-")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &Server{Kind: kind, Dir: dir, Port: port, bin: bin, cred: cred, log: filepath.Join(dir, "server.log")}
	fail := func(err error) (*Server, error) {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if kind == Postgres {
		pw := filepath.Join(dir, "pw")
		if err := os.WriteFile(pw, []byte(Password+"\n"), 0o600); err != nil {
			return fail(err)
		}
		if cred != nil {
			if err := chownAll(dir, cred); err != nil {
				return fail(err)
			}
		}
		init := exec.Command(initdb, "-D", data, "-U", "sluice", "--pwfile", pw, "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--no-sync")
		init.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		init.Dir = dir
		if out, err := init.CombinedOutput(); err != nil {
			return fail(fmt.Errorf("initdb: %v\n%s", err, out))
		}
		s.args = []string{"-D", data, "-p", strconv.Itoa(port), "-k", dir, "-c", "listen_addresses=127.0.0.1",
			"-c", "fsync=off", "-c", "full_page_writes=off", "-c", "shared_buffers=16MB", "-c", "max_connections=200"}
	} else {
		args := []string{"--no-defaults", "--datadir=" + data, "--auth-root-authentication-method=normal", "--skip-test-db"}
		if os.Geteuid() == 0 {
			args = append(args, "--user=root")
		}
		init := exec.Command(initdb, args...)
		if out, err := init.CombinedOutput(); err != nil {
			return fail(fmt.Errorf("%s: %v\n%s", filepath.Base(initdb), err, out))
		}
		s.args = []string{"--no-defaults", "--datadir=" + data, "--port=" + strconv.Itoa(port), "--bind-address=127.0.0.1",
			"--socket=" + filepath.Join(dir, "mysqld.sock"), "--pid-file=" + filepath.Join(dir, "mysqld.pid"),
			"--innodb-buffer-pool-size=32M", "--innodb-log-file-size=16M", "--innodb-flush-log-at-trx-commit=2",
			"--skip-log-bin", "--skip-name-resolve", "--max-connections=300", "--max-allowed-packet=64M"}
		if os.Geteuid() == 0 {
			s.args = append(s.args, "--user=root")
		}
	}
	if err := s.run(); err != nil {
		return fail(err)
	}
	if kind == MariaDB {
		if err := s.adminMariaDB(); err != nil {
			s.Stop()
			return fail(err)
		}
	}
	return s, nil
}

// adminMariaDB gives the server an administrator "sluice" reached over
// TCP with Password, as PostgreSQL's initdb does.
func (s *Server) adminMariaDB() error {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr = "root", "unix", filepath.Join(s.Dir, "mysqld.sock")
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	for _, q := range []string{
		"CREATE USER 'sluice'@'%' IDENTIFIED BY '" + Password + "'",
		"GRANT ALL PRIVILEGES ON *.* TO 'sluice'@'%' WITH GRANT OPTION",
	} {
		if _, err := db.Exec(q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

func chownAll(dir string, c *syscall.Credential) error {
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(c.Uid), int(c.Gid))
	})
}

// run starts the server process and waits until it answers.
func (s *Server) run() error {
	lf, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o666)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, s.args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = sysProcAttr(s.cred)
	if err := cmd.Start(); err != nil {
		_ = lf.Close()
		return err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = lf.Close()
		close(done)
	}()
	s.cmd, s.done = cmd, done
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-done:
			return fmt.Errorf("%s exited during start; log:\n%s", s.Kind, s.tail())
		default:
		}
		if s.ping() == nil {
			return nil
		}
		if time.Now().After(deadline) {
			s.Kill()
			return fmt.Errorf("%s on port %d not ready after %v; log:\n%s", s.Kind, s.Port, startTimeout, s.tail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *Server) ping() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if s.Kind == MariaDB {
		// Before adminMariaDB, only root through the socket gets in.
		cfg := mysql.NewConfig()
		cfg.User, cfg.Net, cfg.Addr = "root", "unix", filepath.Join(s.Dir, "mysqld.sock")
		cfg.Timeout = time.Second
		conn, err := mysql.NewConnector(cfg)
		if err != nil {
			return err
		}
		db := sql.OpenDB(conn)
		defer db.Close()
		if err := db.PingContext(ctx); err != nil {
			return s.ping2(ctx)
		}
		return nil
	}
	return s.ping2(ctx)
}

// ping2 pings as the administrator over TCP.
func (s *Server) ping2(ctx context.Context) error {
	db, err := s.open("")
	if err != nil {
		return err
	}
	defer db.Close()
	return db.PingContext(ctx)
}

func (s *Server) tail() string {
	b, _ := os.ReadFile(s.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Kill ends the server with SIGKILL, as a crash would, and waits for it.
func (s *Server) Kill() {
	s.closeHandles()
	if s.cmd == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL) // the process group: a server and its workers
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Stop ends the server with SIGTERM (SIGKILL after 10 s) and waits for it.
func (s *Server) Stop() {
	s.closeHandles()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
}

// Restart starts a killed or stopped server again, on its port and data.
// The workers of a killed server may still be exiting for a while on a busy
// host, holding its shared memory or its files (PostgreSQL then refuses to
// start: "pre-existing shared memory block ... is still in use"; MariaDB
// cannot lock ibdata1), so a server that exits during start is started
// again until restartTimeout has passed.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	deadline := time.Now().Add(restartTimeout)
	for {
		err := s.run()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("sqltest: restarting %s: %v", s.Kind, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// restartTimeout bounds Restart's attempts.
const restartTimeout = 30 * time.Second

// URL returns the URL of database db on the server, as user with
// password ("" for the administrator, sluice, with Password).
func (s *Server) URL(db, user, password string) string {
	if user == "" {
		user, password = "sluice", Password
	}
	if s.Kind == MariaDB {
		return fmt.Sprintf("mysql://%s:%s@127.0.0.1:%d/%s", user, password, s.Port, db)
	}
	// On PostgreSQL, NewDatabase's databases are schemas of the database
	// postgres.
	u := fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/postgres", user, password, s.Port)
	if db != "" && db != "postgres" {
		u += "?search_path=" + db
	}
	return u
}

// handle returns the server's pool of administrator connections to db.
func (s *Server) handle(db string) (*sql.DB, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.handles[db]; h != nil {
		return h, nil
	}
	h, err := s.open(db)
	if err != nil {
		return nil, err
	}
	if s.handles == nil {
		s.handles = map[string]*sql.DB{}
	}
	s.handles[db] = h
	return h, nil
}

func (s *Server) closeHandle(db string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.handles[db]; h != nil {
		_ = h.Close()
		delete(s.handles, db)
	}
}

func (s *Server) closeHandles() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for db, h := range s.handles {
		_ = h.Close()
		delete(s.handles, db)
	}
}

// open returns the administrator's handle on database db ("" for the
// server's default).
func (s *Server) open(db string) (*sql.DB, error) {
	if s.Kind == Postgres {
		return sql.Open("pgx", s.URL(db, "", ""))
	}
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName = "sluice", Password, "tcp", "127.0.0.1:"+strconv.Itoa(s.Port), db
	cfg.Timeout = 2 * time.Second
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(conn), nil
}

// Exec runs statements as the administrator on database db ("" for the
// server's default), failing tb on an error. The server keeps a
// connection pool per database for Exec until it stops.
func (s *Server) Exec(tb testing.TB, db string, stmts ...string) {
	tb.Helper()
	h, err := s.handle(db)
	if err != nil {
		tb.Fatal(err)
	}
	for _, q := range stmts {
		if _, err := h.Exec(q); err != nil {
			tb.Fatalf("sqltest: %s: %v", q, err)
		}
	}
}

// NewDatabase creates an empty database for tb (on PostgreSQL, a schema
// of the database postgres), dropped by its cleanup, and returns its name
// for URL.
func (s *Server) NewDatabase(tb testing.TB) string {
	tb.Helper()
	name := fmt.Sprintf("t%d_%d", os.Getpid(), dbSeq.Add(1))
	if s.Kind == Postgres {
		// A schema of the one test database: far quicker to make than a
		// database. URL adds it to the search path.
		s.Exec(tb, "", "CREATE SCHEMA "+name)
		tb.Cleanup(func() {
			s.closeHandle(name)
			if h, err := s.handle(""); err == nil {
				_, _ = h.Exec("DROP SCHEMA IF EXISTS " + name + " CASCADE")
			}
		})
		return name
	}
	s.Exec(tb, "", "CREATE DATABASE "+name)
	tb.Cleanup(func() {
		s.closeHandle(name)
		if h, err := s.handle(""); err == nil {
			_, _ = h.Exec("DROP DATABASE IF EXISTS " + name)
		}
	})
	return name
}
