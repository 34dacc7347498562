package slidingwindow

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// driveProbes calls f while the circuit is open, so that its calls start the probes, until
// a probe gets an answer; it returns how many of f's calls went to Redis (a call can slip
// in between the circuit closing and the loop seeing it).
func driveProbes(t *testing.T, l *Limiter, f func() (*MultiLimitResult, error)) (real int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); l.Stats().Down; {
		if time.Now().After(deadline) {
			t.Fatalf("the circuit did not close: %+v", l.Stats())
		}
		d, err := f()
		if err != nil {
			t.Fatal(err)
		}
		if !d.Degraded() {
			real++
		}
		time.Sleep(10 * time.Millisecond)
	}
	return real
}

// TestLiveProbeIsAPeek: the probes a Check or a Refund starts during an outage are PEEKs,
// as in the Python and Node clients' circuits: the request a probe rides on was answered
// without Redis, so the probe neither counts it nor gives anything back.
func TestLiveProbeIsAPeek(t *testing.T) {
	eachAdapter(t, func(t *testing.T, a adapter) { probeIsAPeek(t, a) })
}

func probeIsAPeek(t *testing.T, a adapter) {
	s := moduleServer(t)
	var mu sync.Mutex
	var errs []string
	l := New(a.single(t, s), Options{Timeout: 300 * time.Millisecond, ProbeInterval: 30 * time.Millisecond, OnError: func(err error) {
		mu.Lock()
		errs = append(errs, err.Error())
		mu.Unlock()
	}})
	t.Cleanup(func() {
		if t.Failed() {
			mu.Lock()
			t.Logf("outage errors: %q", errs)
			mu.Unlock()
		}
	})
	ctx := context.Background()
	call := NewCall(5, 600)
	outage := func() {
		t.Helper()
		s.Stop()
		d, err := l.Check(ctx, "warm", call)
		if err != nil || !d.Degraded() || !l.Stats().Down {
			t.Fatalf("the stopped server did not open the circuit: %+v %v %+v", d, err, l.Stats())
		}
		s.Start() // same port, empty
	}

	outage()
	probes := l.Stats().Probes
	real := driveProbes(t, l, func() (*MultiLimitResult, error) { return l.Check(ctx, "c", call) })
	if l.Stats().Probes == probes {
		t.Fatal("no probe was started")
	}
	if n := current(t, s, l.Key("c")); n != int64(real) {
		t.Fatalf("after Check's probes: current %d, want %d (the calls that reached Redis; a CHECK probe adds one)", n, real)
	}

	outage()
	for i := 0; i < 3; i++ {
		if err := client(t, s).Do(ctx, "SLIDINGWINDOW.CHECK", l.Key("r"), "5", "600").Err(); err != nil {
			t.Fatal(err)
		}
	}
	real = driveProbes(t, l, func() (*MultiLimitResult, error) { return l.Refund(ctx, "r", call) })
	if n := current(t, s, l.Key("r")); n != int64(3-real) {
		t.Fatalf("after Refund's probes: current %d, want %d (a REFUND probe gives one back)", n, 3-real)
	}
}

// current is the current window's count of key (600 s), read on a connection of its own.
func current(t *testing.T, s *server, key string) int64 {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer c.Close()
	v, err := c.Do(context.Background(), "SLIDINGWINDOW.COUNTS", key, "600").Slice()
	if err != nil || len(v) != 3 {
		t.Fatalf("COUNTS %s: %v %v", key, v, err)
	}
	return v[1].(int64)
}

// TestLiveOutageNeverAnError: while the server is stopped and started again and again,
// calls from 8 goroutines always get an answer (degraded or from Redis), never the outage
// as an error, also when a probe closes the circuit between a call's gate and its answer.
func TestLiveOutageNeverAnError(t *testing.T) {
	s := moduleServer(t)
	l := New(GoRedis(client(t, s)), Options{Timeout: 200 * time.Millisecond, ProbeInterval: time.Millisecond})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var calls, degraded atomic.Int64
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				d, err := l.Check(context.Background(), "n", NewCall(1000000, 600))
				if err != nil {
					t.Errorf("call %d: %v", i, err)
					return
				}
				calls.Add(1)
				if d.Degraded() {
					degraded.Add(1)
				}
			}
		}()
	}
	for i := 0; i < 4; i++ {
		time.Sleep(100 * time.Millisecond)
		s.Stop()
		time.Sleep(100 * time.Millisecond)
		s.Start()
	}
	time.Sleep(100 * time.Millisecond)
	close(stop)
	wg.Wait()
	st := l.Stats()
	if degraded.Load() == 0 || degraded.Load() == calls.Load() || st.Outages < 2 {
		t.Fatalf("%d calls, %d degraded, %+v: want both kinds and several outages", calls.Load(), degraded.Load(), st)
	}
	t.Logf("%d calls, %d degraded, %+v", calls.Load(), degraded.Load(), st)
}
