package slidingwindow

import (
	"container/list"
	"context"
	"math"
	"slices"
	"sync"
	"time"
)

// DefaultMaxEntries is a DenyCache's default size (keys held).
const DefaultMaxEntries = 10000

const (
	cachePPM      = 500e-6
	cacheMargin   = 0.001
	flightWait    = 5 * time.Second
	clockSamples  = 3
	maxSlotsOfKey = 8
)

var monoBase = time.Now()

// mono is the cache's monotonic clock in seconds (replaced by the conformance replay).
var mono = func() float64 { return time.Since(monoBase).Seconds() }

type spec struct {
	key    string
	limits []Limit
	ms     bool
	now    uint64
	hasNow bool
	cost   uint64
}

type slot struct {
	limits []Limit
	ms     bool
	server bool
	cost   uint64
}

func (s spec) slot() slot { return slot{s.limits, s.ms, !s.hasNow, s.cost} }

func (a slot) equal(b slot) bool {
	return a.ms == b.ms && a.server == b.server && a.cost == b.cost && slices.Equal(a.limits, b.limits)
}

type entry struct {
	slot     slot
	result   *MultiLimitResult
	never    bool
	deadline float64
	origin   float64
	flight   chan struct{}
	waiters  int
}

type held struct {
	key   string
	slots []*entry
	use   *list.Element // in DenyCache.lru: front least recently used
}

type serverClock struct{ lo, hi, at float64 }

// DenyCacheStats are a DenyCache's counters.
type DenyCacheStats struct {
	Hits, Misses, Stored, Expired, Cleared, Evicted, Waits, Entries uint64
}

// DenyCache answers a refusal locally until the earliest instant Redis could allow the
// same request (never early: less 1 ms and 500 ppm of the span), so a flood of refused
// requests costs Redis one call per identity and wait. Concurrent misses on one key and
// its limits send one call and wait for it (the single flight). Safe for concurrent use;
// share one between limiters on the same Redis only.
type DenyCache struct {
	maxEntries   int
	clockRefresh time.Duration
	mu           sync.Mutex
	keys         map[string]*held
	lru          *list.List // of *held, least recently used first
	stats        DenyCacheStats
	clears       uint64
	clock        *serverClock
	clockBusy    bool
}

// NewDenyCache holds at most maxEntries keys (<= 0: DefaultMaxEntries) and measures the
// server clock's offset (TIME) at most once per clockRefresh for calls in seconds (0:
// never; NewDefaultDenyCache uses 10 s).
func NewDenyCache(maxEntries int, clockRefresh time.Duration) *DenyCache {
	if maxEntries <= 0 {
		maxEntries = DefaultMaxEntries
	}
	return &DenyCache{maxEntries: maxEntries, clockRefresh: clockRefresh, keys: map[string]*held{}, lru: list.New()}
}

// NewDefaultDenyCache is NewDenyCache(10000, 10 s).
func NewDefaultDenyCache() *DenyCache { return NewDenyCache(DefaultMaxEntries, 10*time.Second) }

// Stats reads the counters.
func (d *DenyCache) Stats() DenyCacheStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.stats
	for _, h := range d.keys {
		s.Entries += uint64(len(h.slots))
	}
	return s
}

// Forget drops key's entries (a refund or a reset).
func (d *DenyCache) Forget(key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.clears++
	if h, ok := d.keys[key]; ok {
		d.drop(h)
		d.stats.Cleared += uint64(len(h.slots))
		for _, e := range h.slots {
			wake(e)
		}
	}
}

// Clear drops every entry.
func (d *DenyCache) Clear() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.clears++
	for k, h := range d.keys {
		for _, e := range h.slots {
			wake(e)
		}
		delete(d.keys, k)
	}
	d.lru.Init()
}

func wake(e *entry) {
	if e.flight != nil {
		close(e.flight)
		e.flight = nil
	}
}

// touch makes h the most recently used key.
func (d *DenyCache) touch(h *held) { d.lru.MoveToBack(h.use) }

// hold is key's held entries, added as the most recently used key when new.
func (d *DenyCache) hold(key string) *held {
	if h := d.keys[key]; h != nil {
		return h
	}
	h := &held{key: key}
	h.use = d.lru.PushBack(h)
	d.keys[key] = h
	return h
}

// drop removes h (its flights are the caller's to wake).
func (d *DenyCache) drop(h *held) {
	delete(d.keys, h.key)
	d.lru.Remove(h.use)
}

// evict drops least recently used keys while more than maxEntries are held, waking the
// calls waiting on their flights (they then ask Redis), as the Python and Node caches do.
func (d *DenyCache) evict() {
	for len(d.keys) > d.maxEntries {
		h := d.lru.Front().Value.(*held)
		d.drop(h)
		d.stats.Evicted += uint64(len(h.slots))
		for _, e := range h.slots {
			wake(e)
		}
	}
}

func elapsedUnits(s spec, origin, t float64) uint64 {
	if s.hasNow {
		if s.now < uint64(origin) {
			return 0
		}
		return s.now - uint64(origin)
	}
	secs := math.Max(t-origin, 0)
	if s.ms {
		return uint64(math.Floor(secs * 1000))
	}
	return uint64(math.Floor(secs))
}

func countDown(r *MultiLimitResult, cost uint64, e uint64) *MultiLimitResult {
	if e == 0 {
		return r.clone()
	}
	ei := int64(min(e, math.MaxInt64))
	one := func(x RateLimitResult, summary bool) RateLimitResult {
		retry := x.RetryAfter
		if retry > 0 {
			retry -= ei
			if retry <= 0 {
				retry = -1
			}
		}
		alone := x.Allowed || (retry == -1 && cost <= x.Limit)
		x.RetryAfter = retry
		if x.ResetAfter > e {
			x.ResetAfter -= e
		} else {
			x.ResetAfter = 0
		}
		x.Allowed = !summary && alone
		return x
	}
	out := &MultiLimitResult{Governing: r.Governing, Limits: make([]RateLimitResult, len(r.Limits))}
	for i, x := range r.Limits {
		out.Limits[i] = one(x, false)
	}
	out.Summary = one(r.Summary, true)
	if out.Summary.RetryAfter == -1 && r.Summary.RetryAfter > 0 {
		out.Summary.RetryAfter = 1 // never reached: the entry ends first
	}
	if len(out.Limits) == 1 {
		out.Limits[0] = out.Summary
	}
	return out
}

func (d *DenyCache) find(s spec) (*held, int) {
	h := d.keys[s.key]
	if h == nil {
		return nil, -1
	}
	sl := s.slot()
	for i, e := range h.slots {
		if e.slot.equal(sl) {
			return h, i
		}
	}
	return h, -1
}

// enter: a hit's answer, or a miss (lead: this call leads the flight), or a flight to wait for.
func (d *DenyCache) enter(s spec) (hit *MultiLimitResult, lead bool, wait chan struct{}) {
	t := mono()
	d.mu.Lock()
	defer d.mu.Unlock()
	h, i := d.find(s)
	if i < 0 {
		d.stats.Misses++
		return nil, false, nil
	}
	d.touch(h)
	e := h.slots[i]
	var live bool
	switch {
	case e.never:
		live = true
	case s.hasNow:
		live = e.origin <= float64(s.now) && float64(s.now) < e.deadline
	default:
		live = t < e.deadline
	}
	if live {
		d.stats.Hits++
		return countDown(e.result, s.cost, elapsedUnits(s, e.origin, t)), false, nil
	}
	if s.hasNow {
		d.stats.Misses++
		return nil, false, nil
	}
	if e.flight != nil {
		e.waiters++
		d.stats.Waits++
		return nil, false, e.flight
	}
	if e.deadline != math.Inf(-1) {
		d.stats.Expired++
		e.deadline = math.Inf(-1)
	}
	e.flight = make(chan struct{})
	d.stats.Misses++
	return nil, true, nil
}

func (d *DenyCache) left(s spec) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, i := d.find(s); i >= 0 {
		e := d.keys[s.key].slots[i]
		e.waiters = max(e.waiters-1, 0)
	}
}

func (d *DenyCache) run(ctx context.Context, s spec, timeFn func(context.Context) (any, error), refund bool, call func(context.Context) (*MultiLimitResult, error)) (*MultiLimitResult, error) {
	if refund {
		d.Forget(s.key)
		r, err := call(ctx)
		d.Forget(s.key)
		return r, err
	}
	var lead bool
	for {
		hit, l, wait := d.enter(s)
		if hit != nil {
			return hit, nil
		}
		if wait == nil {
			lead = l
			break
		}
		t := time.NewTimer(flightWait)
		select {
		case <-wait:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		d.left(s)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	d.mu.Lock()
	clears := d.clears
	d.mu.Unlock()
	tSend := mono()
	r, err := call(ctx)
	tRecv := mono()
	if err == nil && d.wantsClock(s, r, timeFn) {
		d.measure(ctx, timeFn)
	}
	if err != nil {
		r = nil
	}
	d.done(s, lead, r, clears, tSend, tRecv)
	return r, err
}

func (d *DenyCache) wantsClock(s spec, r *MultiLimitResult, timeFn func(context.Context) (any, error)) bool {
	if s.ms || s.hasNow || d.clockRefresh <= 0 || timeFn == nil || r.Allowed() || r.Degraded() {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.clockBusy {
		return false
	}
	fresh := d.clock != nil && mono()-d.clock.at < d.clockRefresh.Seconds()
	if !fresh {
		d.clockBusy = true
	}
	return !fresh
}

func (d *DenyCache) measure(ctx context.Context, timeFn func(context.Context) (any, error)) {
	defer func() {
		d.mu.Lock()
		d.clockBusy = false
		d.mu.Unlock()
	}()
	for i := 0; i < clockSamples; i++ {
		c1 := mono()
		v, err := timeFn(ctx)
		c2 := mono()
		if err != nil {
			return
		}
		f, err := replyInts(v, 2, "TIME")
		if err != nil {
			return
		}
		serverMS := float64(f[0])*1000 + float64(f[1])/1000
		c := &serverClock{lo: serverMS - c2*1000, hi: serverMS - c1*1000, at: c2}
		d.mu.Lock()
		old := d.clock
		keepOld := old != nil && c.hi-c.lo > old.hi-old.lo && c2-old.at < d.clockRefresh.Seconds()
		if !keepOld {
			d.clock = c
		}
		d.mu.Unlock()
	}
}

func (d *DenyCache) deadline(s spec, r *MultiLimitResult, tSend float64, c *serverClock) float64 {
	ra := float64(r.RetryAfter())
	if s.hasNow {
		return float64(s.now) + ra
	}
	if s.ms {
		span := (ra - 1) / 1000
		return tSend + span - cacheMargin - cachePPM*span
	}
	span := ra - 1
	best := tSend + span - cacheMargin - cachePPM*span
	if c != nil {
		age := tSend - c.at
		second := math.Floor((tSend*1000 + c.lo) / 1000)
		end := ((second+ra)*1000 - c.hi) / 1000
		span := end - tSend
		best = math.Max(best, end-cacheMargin-cachePPM*(span+math.Abs(age)))
	}
	return best
}

func (d *DenyCache) done(s spec, lead bool, r *MultiLimitResult, clears uint64, tSend, tRecv float64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	h, i := d.find(s)
	if r != nil && !r.Allowed() && !r.Degraded() && clears == d.clears {
		never := r.RetryAfter() < 0
		dl := math.Inf(1)
		if !never {
			dl = d.deadline(s, r, tSend, d.clock)
		}
		origin := tRecv
		if s.hasNow {
			origin = float64(s.now)
		}
		fresh := &entry{slot: s.slot(), result: r.clone(), never: never, deadline: dl, origin: origin}
		if h == nil {
			h = d.hold(s.key)
		}
		if i >= 0 {
			old := h.slots[i]
			fresh.waiters = old.waiters
			if lead {
				wake(old)
			} else {
				fresh.flight, old.flight = old.flight, nil
			}
			h.slots[i] = fresh
		} else {
			if len(h.slots) >= maxSlotsOfKey {
				wake(h.slots[0])
				h.slots = h.slots[1:]
			}
			h.slots = append(h.slots, fresh)
		}
		d.touch(h)
		d.stats.Stored++
		d.evict()
		return
	}
	if lead && i >= 0 {
		e := h.slots[i]
		over := r == nil || r.Degraded() || e.waiters == 0
		if over {
			h.slots = append(h.slots[:i], h.slots[i+1:]...)
			if len(h.slots) == 0 {
				d.drop(h)
			}
		}
		wake(e)
	}
}
