package main

// The load: keep-alive HTTP/1.1 connections, each sending GET / with an X-Id header and
// reading the whole answer before the next, flat out or paced to a total rate.

import (
	"bufio"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"
)

// traffic names the identity of each request.
type traffic func(rng *rand.Rand) string

// allowedTraffic spreads requests over 10,000 identities (none near its limit).
func allowedTraffic(rng *rand.Rand) string { return fmt.Sprintf("u%d", rng.Intn(10000)) }

// hotTraffic sends 90% of requests as one identity (refused once past its limit) and the
// rest spread over 10,000.
func hotTraffic(rng *rand.Rand) string {
	if rng.Intn(10) != 0 {
		return "hot"
	}
	return allowedTraffic(rng)
}

// oneIdentity: every request is the same caller (the overshoot run).
func oneIdentity(*rand.Rand) string { return "one" }

type loadResult struct {
	requests, non2xx int
	seconds          float64
	p50ms, p99ms     float64
	decisions        []decision // with keep: every answer, as the caller saw it
}

// decision is one answer: when (unix ns, halfway between sending and the answer), whether
// it was allowed (2xx), and the Retry-After it carried (-1: none).
type decision struct {
	T          int64   `json:"t"`
	Allowed    bool    `json:"a"`
	RetryAfter float64 `json:"r"`
}

// load sends from `conns` connections spread over `ports` for d, at `rate` requests/s in
// total (0: as fast as answered).
// With keep, every answer is kept as a decision.
func load(ports []int, conns int, d time.Duration, rate float64, who traffic, keep bool) (loadResult, error) {
	var pace time.Duration
	if rate > 0 {
		pace = time.Duration(float64(conns) / rate * float64(time.Second))
	}
	deadline := time.Now().Add(d)
	start := time.Now()
	lat := make([][]time.Duration, conns)
	bad := make([]int, conns)
	errs := make([]error, conns)
	kept := make([][]decision, conns)
	var wg sync.WaitGroup
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			var log *[]decision
			if keep {
				log = &kept[i]
			}
			lat[i], bad[i], errs[i] = connection(ports[i%len(ports)], deadline, pace, who, int64(i), log)
		}(i)
	}
	wg.Wait()
	res := loadResult{seconds: time.Since(start).Seconds()}
	var all []time.Duration
	for i := range lat {
		if errs[i] != nil {
			return res, errs[i]
		}
		all = append(all, lat[i]...)
		res.non2xx += bad[i]
		res.decisions = append(res.decisions, kept[i]...)
	}
	sort.Slice(all, func(a, b int) bool { return all[a] < all[b] })
	res.requests = len(all)
	pct := func(p float64) float64 {
		if len(all) == 0 {
			return 0
		}
		return float64(all[min(int(float64(len(all))*p), len(all)-1)]) / 1e6
	}
	res.p50ms, res.p99ms = pct(0.50), pct(0.99)
	return res, nil
}

// answerTimeout bounds one request: an app that stops answering fails the run.
const answerTimeout = 15 * time.Second

func connection(port int, deadline time.Time, pace time.Duration, who traffic, seed int64, log *[]decision) ([]time.Duration, int, error) {
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	var c net.Conn
	var r *bufio.Reader
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	rng := rand.New(rand.NewSource(seed))
	var lat []time.Duration
	non2xx := 0
	next := time.Now()
	for time.Now().Before(deadline) {
		if pace > 0 {
			if wait := time.Until(next); wait > 0 {
				time.Sleep(wait)
			}
			next = next.Add(pace)
		}
		t0 := time.Now()
		if c == nil { // first, or after the app closed it ("Connection: close")
			var err error
			if c, err = net.Dial("tcp", addr); err != nil {
				return nil, 0, err
			}
			r = bufio.NewReader(c)
		}
		_ = c.SetDeadline(t0.Add(answerTimeout))
		if _, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: bench\r\nX-Id: %s\r\n\r\n", who(rng)); err != nil {
			return nil, 0, err
		}
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %w", addr, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.Close {
			c.Close()
			c = nil
		}
		took := time.Since(t0)
		if resp.StatusCode >= 300 {
			non2xx++
		}
		if log != nil {
			d := decision{T: t0.Add(took / 2).UnixNano(), Allowed: resp.StatusCode < 300, RetryAfter: -1}
			if v, err := strconv.ParseFloat(resp.Header.Get("Retry-After"), 64); err == nil {
				d.RetryAfter = v
			}
			*log = append(*log, d)
		}
		lat = append(lat, took)
	}
	return lat, non2xx, nil
}
