package slidingwindow

// Real redis-server processes on free 127.0.0.1 ports (internal/testserver, shared with
// the examples' tests), stopped in t.Cleanup.

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redis-slidingwindow/redis-slidingwindow/clients/go/internal/testserver"
)

type server = testserver.Server

// moduleServer is Redis 7.0 with the module loaded.
func moduleServer(t *testing.T) *server { return testserver.Module(t) }

// libraryServer is Redis 7.0 without the module (the client loads the library).
func libraryServer(t *testing.T) *server { return testserver.Library(t) }

// redis62 is Redis 6.2 (EVALSHA).
func redis62(t *testing.T) *server { return testserver.Redis62(t) }

func client(t *testing.T, s *server) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	return c
}

func uniqueID(t *testing.T) string { return fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano()) }
