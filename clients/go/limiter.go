package slidingwindow

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// DefaultTimeout is how long a call waits for Redis before it is an outage.
const DefaultTimeout = 500 * time.Millisecond

// DefaultProbeInterval is the time between two probes' starts while Redis is down.
const DefaultProbeInterval = time.Second

// Options configure a Limiter; the zero value of each field takes the default.
type Options struct {
	// Prefix of every key (key = Prefix + id); default "rate:".
	Prefix string
	// NoPrefix makes the key the id itself (Prefix is then ignored).
	NoPrefix bool
	// Timeout per call (the context's own deadline applies too); default 500 ms.
	Timeout time.Duration
	// FailClosed denies during an outage; the default is fail-open (allow).
	FailClosed bool
	// ProbeInterval between probes while Redis is down; default 1 s.
	ProbeInterval time.Duration
	// Backend: Auto (default), Module or Library.
	Backend Backend
	// OnError is called with each outage error (never with argument errors).
	OnError func(error)
	// DenyCache answers refusals locally until Redis could allow (nil: off).
	DenyCache *DenyCache
	// Logger receives the limiter's lines as structured records (nil: one line of text
	// each on the standard log package, warnings only). Warn: the circuit opens (Redis
	// unavailable) and closes again, an older library that may not be replaced; Error: a
	// panicking OnError hook; Debug: every answer given without Redis (op, key, allowed).
	Logger *slog.Logger
}

// Limiter is the sliding-window rate limiter. It is safe for concurrent use.
type Limiter struct {
	conn    Conn
	direct  bool // conn returns by the deadline itself: no goroutine per call
	chooser *chooser
	circuit *circuit
	prefix  string
	timeout time.Duration
	cache   *DenyCache
	logs    logs
}

// New is a limiter on conn (GoRedis(client), or your own Conn).
func New(conn Conn, opts ...Options) *Limiter {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.NoPrefix {
		o.Prefix = ""
	} else if o.Prefix == "" {
		o.Prefix = "rate:"
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.ProbeInterval <= 0 {
		o.ProbeInterval = DefaultProbeInterval
	}
	g := logs{o.Logger}
	ch := newChooser(o.Backend)
	ch.logs = g
	d, ok := conn.(deadlineBound)
	return &Limiter{
		conn:    conn,
		direct:  ok && d.returnsByDeadline(),
		chooser: ch,
		circuit: &circuit{failOpen: !o.FailClosed, probeInterval: o.ProbeInterval, onError: o.OnError, logs: g},
		prefix:  o.Prefix,
		timeout: o.Timeout,
		cache:   o.DenyCache,
		logs:    g,
	}
}

// Key is the Redis key of id.
func (l *Limiter) Key(id string) string { return l.prefix + id }

// FailsOpen reports whether an outage allows.
func (l *Limiter) FailsOpen() bool { return l.circuit.failOpen }

// Cache is the limiter's deny cache (nil when off).
func (l *Limiter) Cache() *DenyCache { return l.cache }

// Stats are a limiter's counters.
type Stats struct {
	Outages, Probes, Detections, Loads uint64
	Down                               bool
	Mode                               Mode
}

// Stats reads the limiter's counters.
func (l *Limiter) Stats() Stats {
	return Stats{Outages: l.circuit.outages.Load(), Probes: l.circuit.probes.Load(),
		Detections: l.chooser.detections.Load(), Loads: l.chooser.loads.Load(),
		Down: l.circuit.down.Load(), Mode: l.chooser.current()}
}

// Check counts the request when every limit allows it.
func (l *Limiter) Check(ctx context.Context, id string, c Call) (*MultiLimitResult, error) {
	return l.run(ctx, opCheck, id, c, l.cache)
}

// Peek answers what Check would, counting nothing.
func (l *Limiter) Peek(ctx context.Context, id string, c Call) (*MultiLimitResult, error) {
	return l.run(ctx, opPeek, id, c, nil)
}

// Refund gives back cost units counted in the current window.
func (l *Limiter) Refund(ctx context.Context, id string, c Call) (*MultiLimitResult, error) {
	return l.run(ctx, opRefund, id, c, l.cache)
}

// CheckLimits is Check on a rate string ("10/second;1000/hour").
func (l *Limiter) CheckLimits(ctx context.Context, id, rates string) (*MultiLimitResult, error) {
	c, err := Rates(rates)
	if err != nil {
		return nil, err
	}
	return l.Check(ctx, id, c)
}

// PeekLimits is Peek on a rate string.
func (l *Limiter) PeekLimits(ctx context.Context, id, rates string) (*MultiLimitResult, error) {
	c, err := Rates(rates)
	if err != nil {
		return nil, err
	}
	return l.Peek(ctx, id, c)
}

// RefundLimits is Refund on a rate string.
func (l *Limiter) RefundLimits(ctx context.Context, id, rates string) (*MultiLimitResult, error) {
	c, err := Rates(rates)
	if err != nil {
		return nil, err
	}
	return l.Refund(ctx, id, c)
}

// IsAllowed is the seed's call: CHECK without DETAILS, [allowed, count]. now is optional
// (seconds).
func (l *Limiter) IsAllowed(ctx context.Context, id string, limit, windowSeconds uint64, now ...uint64) (bool, uint64, error) {
	args := []string{u64(limit), u64(windowSeconds)}
	if len(now) > 0 {
		args = append(args, u64(now[0]))
	}
	v, err := l.send(ctx, wire{opCheck, l.Key(id), args})
	if err != nil {
		if l.answeredWithout(err) {
			l.degraded("is_allowed", l.Key(id))
			return l.circuit.failOpen, 0, nil
		}
		return false, 0, err
	}
	f, err := replyInts(v, 2, "[allowed, count]")
	if err != nil {
		return false, 0, err
	}
	return f[0] == 1, nonNeg(f[1]), nil
}

// Counts reads the previous and current counts of one window of id. now is optional.
func (l *Limiter) Counts(ctx context.Context, id string, window uint64, ms bool, now ...uint64) (WindowCounts, error) {
	args := []string{u64(window)}
	if len(now) > 0 {
		args = append(args, u64(now[0]))
	}
	if ms {
		args = append(args, "MS")
	}
	v, err := l.send(ctx, wire{opCounts, l.Key(id), args})
	if err != nil {
		if l.answeredWithout(err) {
			l.degraded("counts", l.Key(id))
			return WindowCounts{Degraded: true}, nil
		}
		return WindowCounts{}, err
	}
	return ParseCounts(v)
}

// Reset deletes id's key and its deny-cache entries; an outage is returned.
func (l *Limiter) Reset(ctx context.Context, id string) error {
	key := l.Key(id)
	_, err := l.guarded(ctx, func(ctx context.Context) (any, error) { return l.conn.Do(ctx, key, "DEL", key) })
	if l.cache != nil {
		l.cache.Forget(key)
	}
	return err
}

// Wait checks, and while denied sleeps exactly RetryAfter (never past timeout) and
// checks again; it returns at once when allowed, never possible, degraded, or out of time.
func (l *Limiter) Wait(ctx context.Context, id string, c Call, timeout time.Duration) (*MultiLimitResult, error) {
	deadline := time.Now().Add(timeout)
	c.hasNow = false
	for {
		d, err := l.Check(ctx, id, c)
		if err != nil {
			return nil, err
		}
		left := time.Until(deadline)
		if d.Allowed() || d.Degraded() || d.RetryAfter() < 0 || left <= 0 {
			return d, nil
		}
		pause := time.Duration(d.RetryAfter()) * time.Second
		if c.ms {
			pause = time.Duration(d.RetryAfter()) * time.Millisecond
		}
		t := time.NewTimer(min(pause, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return d, ctx.Err()
		case <-t.C:
		}
	}
}

func (l *Limiter) run(ctx context.Context, o op, id string, c Call, cache *DenyCache) (*MultiLimitResult, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	w := wire{o, l.Key(id), c.args()}
	decide := func(ctx context.Context) (*MultiLimitResult, error) { return l.decide(ctx, w, c) }
	if cache == nil {
		return decide(ctx)
	}
	if l.circuit.down.Load() {
		cache.Clear()
		return decide(ctx)
	}
	s := spec{key: w.key, limits: c.limits, ms: c.ms, now: c.now, hasNow: c.hasNow, cost: c.cost}
	return cache.run(ctx, s, l.clock(), o == opRefund, decide)
}

// clock is how the deny cache asks for the server's TIME (nil in a cluster: no one clock).
func (l *Limiter) clock() func(context.Context) (any, error) {
	if l.conn.IsCluster() {
		return nil
	}
	return func(ctx context.Context) (any, error) {
		return l.guarded(ctx, func(ctx context.Context) (any, error) { return l.conn.Do(ctx, "", "TIME") })
	}
}

var opNames = [...]string{"check", "peek", "refund", "counts"}

// degraded logs an answer given without Redis (Debug, on Options.Logger only).
func (l *Limiter) degraded(op, key string) {
	l.logs.emit(slog.LevelDebug, nil, "slidingwindow: answered without Redis", "op", op, "key", key, "allowed", l.circuit.failOpen)
}

// withoutRedis is send's answer when the circuit answers the call: the gate was closed
// (open circuit), or the call itself met an outage. It is decided there, not by reading
// the circuit again afterwards: a probe may close the circuit in between, and the call
// must still get its degraded answer rather than the outage as an error.
type withoutRedis struct{ *TimeoutError }

func (e *withoutRedis) Unwrap() error { return e.TimeoutError }

func (l *Limiter) answeredWithout(err error) bool {
	var w *withoutRedis
	return errors.As(err, &w)
}

func (l *Limiter) decide(ctx context.Context, w wire, c Call) (*MultiLimitResult, error) {
	v, err := l.send(ctx, w)
	if err != nil {
		if l.answeredWithout(err) {
			l.degraded(opNames[w.op], w.key)
			return Unavailable(l.circuit.failOpen, c.limits, c.ms), nil
		}
		return nil, err
	}
	return ParseReply(v, c.windows(), c.cost, c.ms)
}

// guarded runs f with the limiter's timeout (and the caller's deadline), returning at
// the deadline even when the client under it does not: on the caller's goroutine when the
// Conn returns by the deadline itself (go-redis with ContextTimeoutEnabled, rueidis), else
// on a goroutine of its own that is left behind at the deadline.
func (l *Limiter) guarded(ctx context.Context, f func(context.Context) (any, error)) (any, error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	if l.direct {
		v, err := f(ctx)
		switch {
		case err == nil:
			return v, nil
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
			// The client's own timer can fire a moment before the context's.
			return nil, &TimeoutError{l.timeout}
		case ctx.Err() != nil:
			return nil, ctx.Err()
		}
		return v, err
	}
	type res struct {
		v   any
		err error
	}
	ch := make(chan res, 1)
	go func() {
		v, err := f(ctx)
		ch <- res{v, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil && ctx.Err() == context.DeadlineExceeded {
			return nil, &TimeoutError{l.timeout}
		}
		return r.v, r.err
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, &TimeoutError{l.timeout}
		}
		return nil, ctx.Err()
	}
}

func (l *Limiter) send(ctx context.Context, w wire) (any, error) {
	without := &withoutRedis{&TimeoutError{l.timeout}}
	switch l.circuit.gate() {
	case gateSkip:
		return nil, without
	case gateProbe:
		l.startProbe(w)
		return nil, without
	}
	v, err := l.guarded(ctx, func(ctx context.Context) (any, error) { return l.chooser.call(ctx, l.conn, w) })
	if err == nil {
		return v, nil
	}
	if l.circuit.failed(err) {
		return nil, without
	}
	return nil, err
}

func (l *Limiter) startProbe(w wire) {
	// The probe only looks: it never counts a request nobody is answered for.
	switch w.op {
	case opCheck, opRefund:
		w.op = opPeek
	}
	go func() {
		_, err := l.guarded(context.Background(), func(ctx context.Context) (any, error) { return l.chooser.call(ctx, l.conn, w) })
		l.circuit.probed(err)
	}()
}
