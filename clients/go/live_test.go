package slidingwindow

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// callSet makes every call once and checks the answers against the limit's arithmetic.
func callSet(t *testing.T, l *Limiter) {
	ctx := context.Background()
	id := uniqueID(t)
	for i := uint64(1); i <= 3; i++ {
		d, err := l.Check(ctx, id, NewCall(3, 60))
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed() || d.Summary.Count != i || d.Summary.Remaining != 3-i || d.Degraded() {
			t.Fatalf("check %d: %+v", i, d.Summary)
		}
	}
	d, err := l.Check(ctx, id, NewCall(3, 60))
	if err != nil || d.Allowed() || d.RetryAfter() < 1 {
		t.Fatalf("4th check: %+v %v", d, err)
	}
	p, err := l.Peek(ctx, id, NewCall(3, 60))
	if err != nil || p.Summary.Count != 3 || p.Allowed() {
		t.Fatalf("peek: %+v %v", p, err)
	}
	if _, err := l.Refund(ctx, id, NewCall(3, 60)); err != nil {
		t.Fatal(err)
	}
	if p, err := l.Peek(ctx, id, NewCall(3, 60)); err != nil || p.Summary.Count != 3 || !p.Allowed() || p.Summary.Remaining != 0 { // PEEK answers what CHECK would: 2 given back, 3 with this one
		t.Fatalf("peek after refund: %+v %v", p, err)
	}
	wc, err := l.Counts(ctx, id, 60, false)
	if err != nil || wc.Current != 2 || wc.Degraded {
		t.Fatalf("counts: %+v %v", wc, err)
	}
	m, err := l.CheckLimits(ctx, id+"m", "2/second;5/minute")
	if err != nil || !m.Allowed() || len(m.Limits) != 2 || !m.MS() {
		t.Fatalf("check limits: %+v %v", m, err)
	}
	c, err := l.Check(ctx, id+"c", NewCall(10, 1000).MS().Cost(4).At(1780000000000))
	if err != nil || c.Summary.Count != 4 || c.Summary.Remaining != 6 {
		t.Fatalf("cost ms now: %+v %v", c, err)
	}
	ok, n, err := l.IsAllowed(ctx, id+"s", 1, 60)
	if err != nil || !ok || n != 1 {
		t.Fatalf("is_allowed: %v %d %v", ok, n, err)
	}
	if ok, _, _ = l.IsAllowed(ctx, id+"s", 1, 60); ok {
		t.Fatal("second is_allowed allowed")
	}
	if err := l.Reset(ctx, id); err != nil {
		t.Fatal(err)
	}
	if p, _ := l.Peek(ctx, id, NewCall(3, 60)); p.Summary.Count != 1 || p.Summary.Remaining != 2 {
		t.Fatalf("after reset: %+v", p.Summary)
	}
}

// exactlyTheLimit: 50 goroutines, 100 calls on one identity with limit 37: 37 allowed.
func exactlyTheLimit(t *testing.T, l *Limiter) {
	id := uniqueID(t)
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 50; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2; i++ {
				d, err := l.Check(context.Background(), id, NewCall(37, 600))
				if err != nil {
					t.Error(err)
					return
				}
				if d.Degraded() {
					t.Error("degraded")
				}
				if d.Allowed() {
					allowed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if allowed.Load() != 37 {
		t.Fatalf("%d allowed, want 37", allowed.Load())
	}
}

// adapter is a client library the live bodies run through: each live test runs once per
// adapter, on the same servers.
type adapter struct {
	name    string
	single  func(t *testing.T, s *server) Conn
	cluster func(t *testing.T, addrs []string) Conn
}

var adapters = []adapter{
	{"go-redis", func(t *testing.T, s *server) Conn { return GoRedis(client(t, s)) }, func(t *testing.T, addrs []string) Conn {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
		t.Cleanup(func() { cc.Close() })
		return GoRedis(cc)
	}},
	{"rueidis", func(t *testing.T, s *server) Conn { return Rueidis(rueidisClient(t, s.Addr())) }, func(t *testing.T, addrs []string) Conn {
		return Rueidis(rueidisClient(t, addrs...))
	}},
}

func rueidisClient(t *testing.T, addrs ...string) rueidis.Client {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, Dialer: net.Dialer{Timeout: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// eachAdapter runs body once per adapter, as subtests.
func eachAdapter(t *testing.T, body func(t *testing.T, a adapter)) {
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) { body(t, a) })
	}
}

// checkOnce is a Check of a fresh identity that must reach Redis; a call that meets a
// connection dropped by a restart is tried again (at most twice more).
func checkOnce(t *testing.T, l *Limiter, what string) {
	t.Helper()
	var d *MultiLimitResult
	var err error
	for i := 0; i < 3; i++ {
		d, err = l.Check(context.Background(), uniqueID(t), NewCall(3, 60))
		if err == nil && !d.Degraded() && d.Summary.Count == 1 {
			return
		}
		time.Sleep(time.Duration(i+1) * 100 * time.Millisecond)
	}
	t.Fatalf("%s: %+v %v", what, d, err)
}

func TestLiveModule(t *testing.T) {
	s := moduleServer(t)
	eachAdapter(t, func(t *testing.T, a adapter) {
		l := New(a.single(t, s), Options{Prefix: a.name + ":"})
		callSet(t, l)
		exactlyTheLimit(t, l)
		if m := l.chooser.current(); m != ModeModule {
			t.Fatalf("mode %v, want the module", m)
		}
	})
}

func TestLiveLibrary(t *testing.T) {
	s := libraryServer(t)
	direct := client(t, s)
	eachAdapter(t, func(t *testing.T, a adapter) {
		l := New(a.single(t, s), Options{Prefix: a.name + ":"})
		callSet(t, l)
		exactlyTheLimit(t, l)
		if m := l.chooser.current(); m != ModeFunction {
			t.Fatalf("mode %v, want the library", m)
		}
		// FUNCTION FLUSH: the next call loads it again.
		loads := l.Stats().Loads
		if err := direct.Do(context.Background(), "FUNCTION", "FLUSH").Err(); err != nil {
			t.Fatal(err)
		}
		d, err := l.Check(context.Background(), uniqueID(t), NewCall(3, 60))
		if err != nil || !d.Allowed() || d.Degraded() || d.Summary.Count != 1 || l.Stats().Loads != loads+1 {
			t.Fatalf("after FUNCTION FLUSH: %+v %v %+v", d, err, l.Stats())
		}
		// restart without the library: loaded again.
		s.Stop()
		s.Start()
		checkOnce(t, l, "after a restart without the library")
		if l.Stats().Loads != loads+2 {
			t.Fatalf("after a restart: %+v, want one more load", l.Stats())
		}
	})
}

func TestLiveRedis62Evalsha(t *testing.T) {
	s := redis62(t)
	direct := client(t, s)
	eachAdapter(t, func(t *testing.T, a adapter) {
		l := New(a.single(t, s), Options{Prefix: a.name + ":"})
		callSet(t, l)
		if m := l.chooser.current(); m != ModeEval {
			t.Fatalf("mode %v, want EVALSHA", m)
		}
		if err := direct.Do(context.Background(), "SCRIPT", "FLUSH").Err(); err != nil {
			t.Fatal(err)
		}
		d, err := l.Check(context.Background(), uniqueID(t), NewCall(3, 60))
		if err != nil || d.Degraded() || d.Summary.Count != 1 {
			t.Fatalf("after SCRIPT FLUSH: %+v %v", d, err)
		}
	})
}

func TestLiveServerStopped(t *testing.T) {
	eachAdapter(t, func(t *testing.T, a adapter) { serverStopped(t, a) })
}

func serverStopped(t *testing.T, a adapter) {
	s := moduleServer(t)
	l := New(a.single(t, s), Options{Timeout: 300 * time.Millisecond})
	if _, err := l.Check(context.Background(), "x", NewCall(3, 60)); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	for i := 0; i < 3; i++ {
		start := time.Now()
		d, err := l.Check(context.Background(), "x", NewCall(3, 60))
		took := time.Since(start)
		if err != nil || !d.Degraded() || !d.Allowed() {
			t.Fatalf("stopped server, call %d: %+v %v", i, d, err)
		}
		if took > 400*time.Millisecond {
			t.Fatalf("stopped server, call %d took %v", i, took)
		}
	}
}
