package slidingwindow

import (
	"fmt"
	"strconv"
)

// RateLimitResult is one limit's verdict. Times are in the call's unit: seconds, or
// milliseconds when MS.
//
// When Degraded (Redis could not be asked; see fail-open) only Allowed means anything:
// the counters are placeholders (Count 0, Remaining = Limit when allowed else 0,
// RetryAfter -1, ResetAfter 0) that the header helpers leave out.
type RateLimitResult struct {
	Allowed   bool
	Count     uint64
	Limit     uint64
	Remaining uint64
	// RetryAfter is -1 when allowed, and -1 when never possible (cost > limit, or limit
	// 0) with Allowed false; else the smallest whole number of units after which the same
	// request is allowed.
	RetryAfter int64
	// ResetAfter is the number of units until the estimate is 0 again with no traffic.
	ResetAfter uint64
	Window     uint64
	MS         bool
	Degraded   bool
}

func (r RateLimitResult) inSeconds(units uint64) uint64 {
	if r.MS {
		return (units + 999) / 1000 // rounded up: never early
	}
	return units
}

// RetryAfterSeconds is RetryAfter in whole seconds, rounded up; ok is false when
// RetryAfter is -1 (allowed now, or never).
func (r RateLimitResult) RetryAfterSeconds() (seconds uint64, ok bool) {
	if r.RetryAfter < 0 {
		return 0, false
	}
	return r.inSeconds(uint64(r.RetryAfter)), true
}

// ResetAfterSeconds is ResetAfter in whole seconds, rounded up.
func (r RateLimitResult) ResetAfterSeconds() uint64 { return r.inSeconds(r.ResetAfter) }

// WindowSeconds is the window in whole seconds, rounded up, at least 1.
func (r RateLimitResult) WindowSeconds() uint64 { return max(r.inSeconds(r.Window), 1) }

func unavailableResult(allowed bool, l Limit, ms bool) RateLimitResult {
	rem := uint64(0)
	if allowed {
		rem = l.Limit
	}
	return RateLimitResult{Allowed: allowed, Limit: l.Limit, Remaining: rem, RetryAfter: -1, Window: l.Window, MS: ms, Degraded: true}
}

// MultiLimitResult is a decision on one or several limits (all must allow; then each
// counts). Summary is the reply's head; Limits holds each limit's own verdict in call
// order; Governing indexes the limit the summary speaks for (when denied, the one with the
// latest RetryAfter, "never" latest of all; when allowed, the fewest remaining; ties to
// the first). With one limit, Limits is [Summary].
type MultiLimitResult struct {
	Summary   RateLimitResult
	Limits    []RateLimitResult
	Governing int
}

// Allowed reports whether every limit allows the request.
func (m *MultiLimitResult) Allowed() bool { return m.Summary.Allowed }

// Degraded reports whether the answer was given without Redis.
func (m *MultiLimitResult) Degraded() bool { return m.Summary.Degraded }

// RetryAfter is the summary's RetryAfter (-1 when allowed or never).
func (m *MultiLimitResult) RetryAfter() int64 { return m.Summary.RetryAfter }

// MS reports whether the times are in milliseconds.
func (m *MultiLimitResult) MS() bool { return m.Summary.MS }

// GoverningResult is the governing limit's own verdict.
func (m *MultiLimitResult) GoverningResult() RateLimitResult { return m.Limits[m.Governing] }

func (m *MultiLimitResult) clone() *MultiLimitResult {
	c := *m
	c.Limits = append([]RateLimitResult(nil), m.Limits...)
	return &c
}

// WindowCounts is what COUNTS answers for one window of a key.
type WindowCounts struct {
	Previous uint64
	Current  uint64
	Elapsed  uint64
	Degraded bool
}

// ReplyError is a reply this client cannot read.
type ReplyError struct{ Msg string }

func (e *ReplyError) Error() string { return "slidingwindow: unexpected reply: " + e.Msg }

func replyInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case int:
		return int64(x), true
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		return n, err == nil
	}
	return 0, false
}

func replyInts(v any, n int, what string) ([]int64, error) {
	items, ok := v.([]any)
	if !ok || len(items) < n {
		return nil, &ReplyError{fmt.Sprintf("%s: expected %d integers, got %#v", what, n, v)}
	}
	out := make([]int64, n)
	for i := 0; i < n; i++ {
		x, ok := replyInt(items[i])
		if !ok {
			return nil, &ReplyError{fmt.Sprintf("%s: not an integer: %#v", what, items[i])}
		}
		out[i] = x
	}
	return out, nil
}

func nonNeg(v int64) uint64 {
	if v < 0 {
		return 0
	}
	return uint64(v)
}

// ParseReply reads a DETAILS reply: 6 integers for one limit, a 7th element (one array
// per limit, [window, limit, count, remaining, retry_after, reset_after]) for several.
// windows are the call's windows in call order.
func ParseReply(reply any, windows []uint64, cost uint64, ms bool) (*MultiLimitResult, error) {
	if len(windows) == 0 {
		return nil, &ReplyError{"no windows given"}
	}
	head, err := replyInts(reply, 6, "DETAILS reply")
	if err != nil {
		return nil, err
	}
	allowed := head[0] == 1
	summary := RateLimitResult{Allowed: allowed, Count: nonNeg(head[1]), Limit: nonNeg(head[2]),
		Remaining: nonNeg(head[3]), RetryAfter: head[4], ResetAfter: nonNeg(head[5]), Window: windows[0], MS: ms}
	if len(windows) == 1 {
		return &MultiLimitResult{Summary: summary, Limits: []RateLimitResult{summary}}, nil
	}
	items := reply.([]any)
	if len(items) != 7 {
		return nil, &ReplyError{fmt.Sprintf("expected 7 elements: %#v", reply)}
	}
	per, ok := items[6].([]any)
	if !ok || len(per) != len(windows) {
		return nil, &ReplyError{fmt.Sprintf("7th element: %#v", items[6])}
	}
	limits := make([]RateLimitResult, 0, len(per))
	governing := -1
	for _, item := range per {
		f, err := replyInts(item, 6, "a limit's verdict")
		if err != nil {
			return nil, err
		}
		limit, retry := nonNeg(f[1]), f[4]
		alone := allowed || (retry == -1 && cost <= limit)
		if governing < 0 && f[1] == head[2] && f[2] == head[1] && f[3] == head[3] && f[4] == head[4] {
			governing = len(limits)
		}
		limits = append(limits, RateLimitResult{Allowed: alone, Count: nonNeg(f[2]), Limit: limit,
			Remaining: nonNeg(f[3]), RetryAfter: retry, ResetAfter: nonNeg(f[5]), Window: nonNeg(f[0]), MS: ms})
	}
	if governing < 0 {
		return nil, &ReplyError{fmt.Sprintf("no limit in the DETAILS reply matches its summary: %#v", reply)}
	}
	summary.Window = limits[governing].Window
	return &MultiLimitResult{Summary: summary, Limits: limits, Governing: governing}, nil
}

// Unavailable is the placeholder of a call answered without Redis: allowed is the
// limiter's fail-open setting.
func Unavailable(allowed bool, limits []Limit, ms bool) *MultiLimitResult {
	out := make([]RateLimitResult, len(limits))
	for i, l := range limits {
		out[i] = unavailableResult(allowed, l, ms)
	}
	return &MultiLimitResult{Summary: out[0], Limits: out}
}

// ParseCounts reads a COUNTS reply: [previous, current, elapsed].
func ParseCounts(reply any) (WindowCounts, error) {
	f, err := replyInts(reply, 3, "COUNTS reply")
	if err != nil {
		return WindowCounts{}, err
	}
	return WindowCounts{Previous: nonNeg(f[0]), Current: nonNeg(f[1]), Elapsed: nonNeg(f[2])}, nil
}
