package slidingwindow

import (
	"strconv"
	"strings"
)

// Header is one response header.
type Header struct{ Name, Value string }

// SfString renders value as an RFC 8941 string (quoted, \ and " escaped); ok is false
// when value holds a character outside printable ASCII.
func SfString(value string) (s string, ok bool) {
	for _, c := range value {
		if c < ' ' || c > '~' {
			return "", false
		}
	}
	v := strings.ReplaceAll(value, `\`, `\\`)
	return `"` + strings.ReplaceAll(v, `"`, `\"`) + `"`, true
}

func sf(value string) string {
	if s, ok := SfString(value); ok {
		return s
	}
	return `"default"`
}

// PolicyHeader is one draft RateLimit-Policy item: "name";q=limit;w=seconds.
func PolicyHeader(name string, limit, windowSeconds uint64) string {
	return sf(name) + ";q=" + u64(limit) + ";w=" + u64(windowSeconds)
}

// moreQuota is the draft's t=: seconds until more quota (the wait when denied and
// possible, else the reset).
func moreQuota(r RateLimitResult) uint64 {
	if s, ok := r.RetryAfterSeconds(); ok {
		return s
	}
	return r.ResetAfterSeconds()
}

func xHeaders(r RateLimitResult) []Header {
	return []Header{
		{"X-RateLimit-Limit", u64(r.Limit)},
		{"X-RateLimit-Remaining", u64(r.Remaining)},
		{"X-RateLimit-Reset", u64(r.ResetAfterSeconds())},
	}
}

func withRetry(h []Header, summary RateLimitResult) []Header {
	if s, ok := summary.RetryAfterSeconds(); ok {
		h = append(h, Header{"Retry-After", u64(s)})
	}
	return h
}

// RateLimitHeaders are one limit's headers: X-RateLimit-Limit, -Remaining, -Reset
// (seconds from now), RateLimit-Policy and RateLimit (IETF draft), and Retry-After on a
// denial that can end. A degraded result gets none.
func RateLimitHeaders(r RateLimitResult, policy string) []Header {
	if r.Degraded {
		return nil
	}
	h := xHeaders(r)
	h = append(h,
		Header{"RateLimit-Policy", PolicyHeader(policy, r.Limit, r.WindowSeconds())},
		Header{"RateLimit", sf(policy) + ";r=" + u64(r.Remaining) + ";t=" + u64(moreQuota(r))})
	return withRetry(h, r)
}

// LimitName is a limit's name in the draft-11 lists: <policy>/<window>s whenever the
// window is a whole number of seconds, else <policy>/<window>ms.
func LimitName(policy string, r RateLimitResult) string {
	if r.MS && r.Window%1000 == 0 {
		return policy + "/" + u64(r.Window/1000) + "s"
	}
	unit := "s"
	if r.MS {
		unit = "ms"
	}
	return policy + "/" + u64(r.Window) + unit
}

// LimitsHeaders are a decision's headers: with one limit RateLimitHeaders; with several,
// X-RateLimit-* from the governing limit and draft-11 lists naming each limit. A
// degraded result gets none.
func LimitsHeaders(m *MultiLimitResult, policy string) []Header {
	if len(m.Limits) <= 1 {
		return RateLimitHeaders(m.Summary, policy)
	}
	if m.Degraded() {
		return nil
	}
	h := xHeaders(m.Limits[m.Governing])
	policies := make([]string, len(m.Limits))
	states := make([]string, len(m.Limits))
	for i, r := range m.Limits {
		n := sf(LimitName(policy, r))
		policies[i] = n + ";q=" + u64(r.Limit) + ";w=" + u64(r.WindowSeconds())
		states[i] = n + ";r=" + u64(r.Remaining) + ";t=" + strconv.FormatUint(moreQuota(r), 10)
	}
	h = append(h, Header{"RateLimit-Policy", strings.Join(policies, ", ")},
		Header{"RateLimit", strings.Join(states, ", ")})
	return withRetry(h, m.Summary)
}
