package main

// Judging an overshoot run against an exact sliding log: what each limiter let through
// in any true window of W, what it refused that the log would have allowed, and how far
// its Retry-After was from the moment the log would next allow.

import (
	"math"
	"sort"
)

type verdict struct {
	Allowed        int     `json:"allowed"`
	Refused        int     `json:"refused"`
	MostInWindow   int     `json:"most_in_any_window"`     // after the first two windows
	WronglyRefused int     `json:"wrongly_refused"`        // refused with < limit allowed in (t-W, t]
	RetryMedianErr float64 `json:"retry_after_median_err"` // s, Retry-After minus the exact wait
	RetryWorstLate float64 `json:"retry_after_worst_late"` // s, the most it told a caller to wait too long
	RetryWorstEarl float64 `json:"retry_after_worst_early"`
	RetryAnswers   int     `json:"retry_after_answers"` // refusals that carried Retry-After
}

// judge reads decisions (ns, any order) of one identity under `limit` per `window` ns.
// Windows are judged from start+2*window on, when every limiter has had time to fill.
func judge(ds []decision, limit int, window int64) verdict {
	sort.Slice(ds, func(a, b int) bool { return ds[a].T < ds[b].T })
	var v verdict
	if len(ds) == 0 {
		return v
	}
	from := ds[0].T + 2*window
	var allowed []int64 // allowed times so far, ascending
	var errs []float64
	v.RetryWorstEarl, v.RetryWorstLate = 0, 0
	for _, d := range ds {
		// The log's count in (t-W, t]: allowed times after t-W.
		inWindow := len(allowed) - sort.Search(len(allowed), func(i int) bool { return allowed[i] > d.T-window })
		if d.Allowed {
			v.Allowed++
			allowed = append(allowed, d.T)
			continue
		}
		v.Refused++
		if d.T < from {
			continue
		}
		if inWindow < limit {
			v.WronglyRefused++
		}
		if d.RetryAfter >= 0 {
			// With no more allowed, the log allows again once the limit-th newest leaves.
			exact := 0.0
			if inWindow >= limit {
				exact = float64(allowed[len(allowed)-limit]+window-d.T) / 1e9
			}
			e := d.RetryAfter - exact
			errs = append(errs, e)
			v.RetryWorstLate = math.Max(v.RetryWorstLate, e)
			v.RetryWorstEarl = math.Max(v.RetryWorstEarl, -e)
		}
	}
	// The most allowed in any [t, t+W) starting at an allowed time from `from` on.
	j := 0
	for i := range allowed {
		if allowed[i] < from {
			continue
		}
		if j < i {
			j = i
		}
		for j < len(allowed) && allowed[j] < allowed[i]+window {
			j++
		}
		v.MostInWindow = max(v.MostInWindow, j-i)
	}
	v.RetryAnswers = len(errs)
	if len(errs) > 0 {
		sort.Float64s(errs)
		v.RetryMedianErr = errs[len(errs)/2]
	}
	return v
}
