package slidingwindow

import (
	"context"
	"testing"
	"time"
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
	direct := client(t, s)
	l := New(a.single(t, s), Options{Timeout: 300 * time.Millisecond, ProbeInterval: 30 * time.Millisecond})
	ctx := context.Background()
	call := NewCall(5, 600)
	outage := func() {
		t.Helper()
		s.stop()
		d, err := l.Check(ctx, "warm", call)
		if err != nil || !d.Degraded() || !l.Stats().Down {
			t.Fatalf("the stopped server did not open the circuit: %+v %v %+v", d, err, l.Stats())
		}
		s.start() // same port, empty
	}

	outage()
	probes := l.Stats().Probes
	real := driveProbes(t, l, func() (*MultiLimitResult, error) { return l.Check(ctx, "c", call) })
	if l.Stats().Probes == probes {
		t.Fatal("no probe was started")
	}
	wc, err := l.Counts(ctx, "c", 600, false)
	if err != nil || wc.Current != uint64(real) {
		t.Fatalf("after Check's probes: current %d, want %d (the calls that reached Redis; a CHECK probe adds one) %v", wc.Current, real, err)
	}

	outage()
	for i := 0; i < 3; i++ {
		if err := direct.Do(ctx, "SLIDINGWINDOW.CHECK", l.Key("r"), "5", "600").Err(); err != nil {
			t.Fatal(err)
		}
	}
	real = driveProbes(t, l, func() (*MultiLimitResult, error) { return l.Refund(ctx, "r", call) })
	wc, err = l.Counts(ctx, "r", 600, false)
	if err != nil || wc.Current != uint64(3-real) {
		t.Fatalf("after Refund's probes: current %d, want %d (a REFUND probe gives one back) %v", wc.Current, 3-real, err)
	}
}
