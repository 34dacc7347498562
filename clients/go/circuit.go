package slidingwindow

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

type gate int

const (
	gateCall gate = iota
	gateSkip
	gateProbe
)

// circuit: after an outage the limiter answers without Redis (fail-open by default) and
// sends one probe at a time, one per probe interval, until Redis answers again.
type circuit struct {
	failOpen      bool
	probeInterval time.Duration
	onError       func(error)
	logs          logs
	down          atomic.Bool
	mu            sync.Mutex
	probing       bool
	since         time.Time
	nextProbe     time.Time
	without       uint64
	outages       atomic.Uint64
	probes        atomic.Uint64
}

func (c *circuit) gate() gate {
	if !c.down.Load() {
		return gateCall
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.down.Load() {
		return gateCall
	}
	c.without++
	now := time.Now()
	if c.probing || now.Before(c.nextProbe) {
		return gateSkip
	}
	c.probing = true
	c.probes.Add(1)
	c.nextProbe = now.Add(c.probeInterval)
	return gateProbe
}

// failed records err; it reports whether err is an outage (the circuit is then open).
func (c *circuit) failed(err error) bool {
	if !IsOutage(err) {
		return false
	}
	c.mu.Lock()
	opened := !c.down.Load()
	if opened {
		now := time.Now()
		c.down.Store(true)
		c.since, c.nextProbe, c.without = now, now.Add(c.probeInterval), 0
		c.outages.Add(1)
	}
	c.mu.Unlock()
	if opened {
		verdict := "allowing (fail-open)"
		if !c.failOpen {
			verdict = "denying (fail-closed)"
		}
		c.logs.emit(slog.LevelWarn, func() string {
			return fmt.Sprintf("slidingwindow: Redis unavailable (%v); %s requests without asking it until a probe (one every %v) gets an answer", err, verdict, c.probeInterval)
		}, "slidingwindow: circuit open: Redis unavailable", "error", err.Error(), "fail_open", c.failOpen, "probe_interval", c.probeInterval)
	}
	c.hook(err)
	return true
}

func (c *circuit) probed(err error) {
	recovered := err == nil || !IsOutage(err)
	c.mu.Lock()
	c.probing = false
	was := c.down.Load()
	if recovered {
		c.down.Store(false)
	}
	since, n := c.since, c.without
	c.mu.Unlock()
	if recovered && was {
		down := time.Since(since)
		c.logs.emit(slog.LevelWarn, func() string {
			return fmt.Sprintf("slidingwindow: Redis reachable again after %.1fs; %d requests were answered without it", down.Seconds(), n)
		}, "slidingwindow: circuit closed: Redis reachable again", "down_for", down, "answered_without_redis", n)
	} else if err != nil && IsOutage(err) {
		c.hook(err)
	}
}

func (c *circuit) hook(err error) {
	if c.onError == nil {
		return
	}
	defer func() {
		if r := recover(); r != nil {
			c.logs.emit(slog.LevelError, func() string { return fmt.Sprintf("slidingwindow: the OnError hook panicked: %v", r) },
				"slidingwindow: the OnError hook panicked", "panic", fmt.Sprint(r))
		}
	}()
	c.onError(err)
}
