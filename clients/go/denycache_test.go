package slidingwindow

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestLiveDenyCacheLRU: the cache holds at most maxEntries keys and lets the least
// recently used go first (a hit makes a key recent), as the Python and Node caches do.
func TestLiveDenyCacheLRU(t *testing.T) {
	s := moduleServer(t)
	cache := NewDenyCache(3, 0)
	l := New(GoRedis(client(t, s)), Options{DenyCache: cache, Prefix: uniqueID(t) + ":"})
	ctx := context.Background()
	call := NewCall(1, 600)
	refuse := func(id string) {
		t.Helper()
		for i := 0; i < 2; i++ {
			d, err := l.Check(ctx, id, call)
			if err != nil || d.Degraded() || d.Allowed() != (i == 0) {
				t.Fatalf("%s, check %d: %+v %v", id, i, d, err)
			}
		}
	}
	hit := func(id string) bool {
		t.Helper()
		before := cache.Stats().Hits
		d, err := l.Check(ctx, id, call)
		if err != nil || d.Allowed() || d.Degraded() {
			t.Fatalf("%s: %+v %v", id, d, err)
		}
		return cache.Stats().Hits == before+1
	}
	for _, id := range []string{"a", "b", "c"} {
		refuse(id)
	}
	if st := cache.Stats(); st.Entries != 3 || st.Evicted != 0 {
		t.Fatalf("three refusals: %+v", st)
	}
	if !hit("a") { // a is now the most recent, b the least
		t.Fatal("a was not answered from the cache")
	}
	refuse("d")
	if st := cache.Stats(); st.Entries != 3 || st.Evicted != 1 {
		t.Fatalf("a fourth key: %+v, want 3 held and 1 evicted", st)
	}
	for id, want := range map[string]bool{"a": true, "c": true, "d": true} {
		if hit(id) != want {
			t.Fatalf("%s: hit %v, want %v", id, !want, want)
		}
	}
	if hit("b") {
		t.Fatal("b, the least recently used, was kept")
	}
}

// TestLiveDenyCacheEvictionWakesWaiters: calls waiting for a key's flight are woken when
// the key is evicted, and ask Redis at once (not after the flight's 5 s wait).
func TestLiveDenyCacheEvictionWakesWaiters(t *testing.T) {
	s := moduleServer(t)
	cache := NewDenyCache(1, 0)
	l := New(GoRedis(client(t, s)), Options{Prefix: uniqueID(t) + ":"})
	ctx := context.Background()
	call := NewCall(1, 300).MS()
	specOf := func(id string) spec { return spec{key: l.Key(id), limits: call.limits, ms: true, cost: 1} }
	decide := func(id string) func(context.Context) (*MultiLimitResult, error) {
		return func(ctx context.Context) (*MultiLimitResult, error) {
			return l.decide(ctx, wire{opCheck, l.Key(id), call.args()}, call)
		}
	}
	for i := 0; i < 2; i++ { // a's refusal, held until the window lets it through
		if _, err := cache.run(ctx, specOf("a"), nil, false, decide("a")); err != nil {
			t.Fatal(err)
		}
	}
	if st := cache.Stats(); st.Entries != 1 {
		t.Fatalf("a's refusal was not stored: %+v", st)
	}
	time.Sleep(350 * time.Millisecond) // the entry ends: the next call leads a flight
	release := make(chan struct{})
	led := make(chan struct{})
	go func() {
		_, _ = cache.run(ctx, specOf("a"), nil, false, func(ctx context.Context) (*MultiLimitResult, error) {
			close(led)
			<-release
			return decide("a")(ctx)
		})
	}()
	<-led
	waited := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		_, _ = cache.run(ctx, specOf("a"), nil, false, decide("a"))
		waited <- time.Since(start)
	}()
	for cache.Stats().Waits == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	for i := 0; i < 2; i++ { // b's refusal evicts a
		if _, err := cache.run(ctx, specOf("b"), nil, false, decide("b")); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case d := <-waited:
		if st := cache.Stats(); st.Evicted != 1 {
			t.Fatalf("stats %+v, want a evicted", st)
		}
		t.Logf("the waiter asked Redis %v after it began to wait", d)
	case <-time.After(2 * time.Second):
		t.Fatal("the waiter was not woken by the eviction")
	}
	close(release)
}

// TestLiveDenyCacheConcurrent: 32 goroutines on 16 identities through a cache that holds
// 4 keys (so it evicts all along): each identity gets exactly its limit, the cache answers
// refusals, and the race detector sees the cache's locking.
func TestLiveDenyCacheConcurrent(t *testing.T) {
	s := moduleServer(t)
	cache := NewDenyCache(4, 10*time.Second)
	l := New(GoRedis(client(t, s)), Options{DenyCache: cache, Prefix: uniqueID(t) + ":"})
	const ids, limit = 16, 5
	var allowed [ids]atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				id := (g*7 + i) % ids
				d, err := l.Check(context.Background(), fmt.Sprint(id), NewCall(limit, 600))
				if err != nil || d.Degraded() {
					t.Errorf("%+v %v", d, err)
					return
				}
				if d.Allowed() {
					allowed[id].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	for id := range allowed {
		if n := allowed[id].Load(); n != limit {
			t.Fatalf("identity %d: %d allowed, want %d", id, n, limit)
		}
	}
	st := cache.Stats()
	if st.Hits == 0 || st.Evicted == 0 || st.Entries > 4 {
		t.Fatalf("cache stats %+v: want hits, evictions and at most 4 keys", st)
	}
	t.Logf("cache: %+v", st)
}

// TestLiveWaitConcurrent: 20 goroutines Wait on one identity (5 per 300 ms) through the
// deny cache: every one is let through, none early: the 20 take at least two windows.
func TestLiveWaitConcurrent(t *testing.T) {
	s := moduleServer(t)
	l := New(GoRedis(client(t, s)), Options{DenyCache: NewDefaultDenyCache(), Prefix: uniqueID(t) + ":"})
	start := time.Now()
	var through atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 20; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := l.Wait(context.Background(), "w", NewCall(5, 300).MS(), 10*time.Second)
			if err != nil || !d.Allowed() || d.Degraded() {
				t.Errorf("wait: %+v %v", d, err)
				return
			}
			through.Add(1)
		}()
	}
	wg.Wait()
	took := time.Since(start)
	if through.Load() != 20 || took < 600*time.Millisecond {
		t.Fatalf("%d let through in %v: want 20, in no less than 600ms", through.Load(), took)
	}
	t.Logf("20 waiters let through in %v", took)
}
