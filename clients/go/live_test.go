package slidingwindow

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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

func TestLiveModule(t *testing.T) {
	s := moduleServer(t)
	l := New(GoRedis(client(t, s)))
	callSet(t, l)
	exactlyTheLimit(t, l)
	if m := l.chooser.current(); m != ModeModule {
		t.Fatalf("mode %v, want the module", m)
	}
}

func TestLiveLibrary(t *testing.T) {
	s := libraryServer(t)
	c := client(t, s)
	l := New(GoRedis(c))
	callSet(t, l)
	exactlyTheLimit(t, l)
	if m := l.chooser.current(); m != ModeFunction {
		t.Fatalf("mode %v, want the library", m)
	}
	// FUNCTION FLUSH: the next call loads it again.
	if err := c.Do(context.Background(), "FUNCTION", "FLUSH").Err(); err != nil {
		t.Fatal(err)
	}
	d, err := l.Check(context.Background(), uniqueID(t), NewCall(3, 60))
	if err != nil || !d.Allowed() || d.Degraded() || d.Summary.Count != 1 {
		t.Fatalf("after FUNCTION FLUSH: %+v %v", d, err)
	}
	// restart without the library: loaded again.
	s.stop()
	s.start()
	d, err = l.Check(context.Background(), uniqueID(t), NewCall(3, 60))
	if err != nil || d.Degraded() || d.Summary.Count != 1 {
		// the first call may meet the dropped connection: one more
		d, err = l.Check(context.Background(), uniqueID(t), NewCall(3, 60))
	}
	if err != nil || d.Degraded() || d.Summary.Count != 1 {
		t.Fatalf("after a restart without the library: %+v %v", d, err)
	}
}

func TestLiveRedis62Evalsha(t *testing.T) {
	s := redis62(t)
	c := client(t, s)
	l := New(GoRedis(c))
	callSet(t, l)
	if m := l.chooser.current(); m != ModeEval {
		t.Fatalf("mode %v, want EVALSHA", m)
	}
	if err := c.Do(context.Background(), "SCRIPT", "FLUSH").Err(); err != nil {
		t.Fatal(err)
	}
	d, err := l.Check(context.Background(), uniqueID(t), NewCall(3, 60))
	if err != nil || d.Degraded() || d.Summary.Count != 1 {
		t.Fatalf("after SCRIPT FLUSH: %+v %v", d, err)
	}
}

func TestLiveServerStopped(t *testing.T) {
	s := moduleServer(t)
	l := New(GoRedis(client(t, s)), Options{Timeout: 300 * time.Millisecond})
	if _, err := l.Check(context.Background(), "x", NewCall(3, 60)); err != nil {
		t.Fatal(err)
	}
	s.stop()
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

var _ = redis.Nil
