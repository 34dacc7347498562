package main

import "testing"

const sec = int64(1e9)

func TestJudgeCountsTheMostInAnyWindow(t *testing.T) {
	// limit 2 per 10 s; after the first two windows (from 20 s): allowed at 20, 21, 25 s
	// puts 3 in [20, 30).
	ds := []decision{
		{T: 0, Allowed: true}, {T: 20 * sec, Allowed: true}, {T: 21 * sec, Allowed: true},
		{T: 25 * sec, Allowed: true}, {T: 40 * sec, Allowed: true},
	}
	v := judge(ds, 2, 10*sec)
	if v.MostInWindow != 3 || v.Allowed != 5 {
		t.Fatalf("got %+v", v)
	}
}

func TestJudgeWrongRefusalsAndRetryAfter(t *testing.T) {
	// limit 2 per 10 s. At 22 s two allowed (20, 21) are in the window: a right refusal,
	// the exact wait 8 s (20 s leaves at 30 s); it said 10: 2 s late. At 35 s only 0 are
	// in (25, 35]: a wrong refusal, exact wait 0, it said 1: 1 s late.
	ds := []decision{
		{T: 0, Allowed: true},
		{T: 20 * sec, Allowed: true}, {T: 21 * sec, Allowed: true},
		{T: 22 * sec, RetryAfter: 10}, {T: 35 * sec, RetryAfter: 1},
		{T: 36 * sec, RetryAfter: -1},
	}
	v := judge(ds, 2, 10*sec)
	if v.Refused != 3 || v.WronglyRefused != 2 || v.RetryAnswers != 2 {
		t.Fatalf("got %+v", v)
	}
	if v.RetryWorstLate != 2 || v.RetryWorstEarl != 0 || v.RetryMedianErr != 2 {
		t.Fatalf("retry errors %+v", v)
	}
}
