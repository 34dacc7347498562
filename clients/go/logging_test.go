package slidingwindow

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"
)

type record struct {
	level slog.Level
	msg   string
	attrs map[string]any
}

// recorder is a slog.Handler that keeps the records.
type recorder struct {
	mu   *sync.Mutex
	recs *[]record
}

func newRecorder() recorder { return recorder{&sync.Mutex{}, &[]record{}} }

func (r recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r recorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r recorder) WithGroup(string) slog.Handler            { return r }
func (r recorder) Handle(_ context.Context, rec slog.Record) error {
	attrs := map[string]any{}
	rec.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.Any(); return true })
	r.mu.Lock()
	*r.recs = append(*r.recs, record{rec.Level, rec.Message, attrs})
	r.mu.Unlock()
	return nil
}

func (r recorder) find(msg string) []record {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []record
	for _, x := range *r.recs {
		if x.msg == msg {
			out = append(out, x)
		}
	}
	return out
}

// TestLiveLogger: with Options.Logger, the circuit's opening and closing are Warn records
// with their figures, and each answer given without Redis a Debug record.
func TestLiveLogger(t *testing.T) {
	s := moduleServer(t)
	rec := newRecorder()
	l := New(GoRedis(client(t, s)), Options{Timeout: 300 * time.Millisecond, ProbeInterval: 30 * time.Millisecond, Logger: slog.New(rec), FailClosed: true})
	ctx := context.Background()
	if d, err := l.Check(ctx, "x", NewCall(3, 60)); err != nil || d.Degraded() {
		t.Fatalf("%+v %v", d, err)
	}
	if len(rec.find("slidingwindow: answered without Redis")) != 0 {
		t.Fatal("an answer from Redis was logged as degraded")
	}
	s.Stop()
	for i := 0; i < 3; i++ {
		if d, err := l.Check(ctx, "x", NewCall(3, 60)); err != nil || !d.Degraded() || d.Allowed() {
			t.Fatalf("stopped, fail-closed: %+v %v", d, err)
		}
	}
	if _, err := l.Counts(ctx, "x", 60, false); err != nil {
		t.Fatal(err)
	}
	open := rec.find("slidingwindow: circuit open: Redis unavailable")
	if len(open) != 1 || open[0].level != slog.LevelWarn || open[0].attrs["fail_open"] != false || open[0].attrs["error"] == "" {
		t.Fatalf("circuit open records: %+v", open)
	}
	deg := rec.find("slidingwindow: answered without Redis")
	if len(deg) != 4 || deg[0].level != slog.LevelDebug || deg[0].attrs["op"] != "check" || deg[0].attrs["key"] != "rate:x" || deg[0].attrs["allowed"] != false || deg[3].attrs["op"] != "counts" {
		t.Fatalf("degraded records: %+v", deg)
	}
	s.Start()
	driveProbes(t, l, func() (*MultiLimitResult, error) { return l.Peek(ctx, "x", NewCall(3, 60)) })
	closed := rec.find("slidingwindow: circuit closed: Redis reachable again")
	if len(closed) != 1 || closed[0].level != slog.LevelWarn || closed[0].attrs["answered_without_redis"].(uint64) < 4 {
		t.Fatalf("circuit closed records: %+v", closed)
	}
}
