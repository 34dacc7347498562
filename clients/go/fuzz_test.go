package slidingwindow

import (
	"strings"
	"testing"
)

// FuzzParseLimits: any text parses to 1..MaxLimits limits with windows in ms, or a
// *RateError; never a panic. A parsed result is stable under re-rendering.
func FuzzParseLimits(f *testing.F) {
	for _, s := range []string{"10/second", "10/second;1000/hour", "100/5 minutes", "1000 per hour", "", "lots", "10/", "18446744073709551615/day"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		ls, err := ParseLimits(text)
		if err != nil {
			if _, ok := err.(*RateError); !ok {
				t.Fatalf("%q: %T %v", text, err, err)
			}
			return
		}
		if len(ls) == 0 || len(ls) > MaxLimits {
			t.Fatalf("%q: %d limits", text, len(ls))
		}
		var parts []string
		for _, l := range ls {
			if l.Window == 0 || l.Window%1000 != 0 {
				t.Fatalf("%q: window %d ms", text, l.Window)
			}
			parts = append(parts, u64(l.Limit)+"/"+u64(l.Window/1000)+" seconds")
		}
		again, err := ParseLimits(strings.Join(parts, ";"))
		if err != nil || len(again) != len(ls) {
			t.Fatalf("%q re-rendered: %v %v", text, again, err)
		}
		for i := range ls {
			if again[i] != ls[i] {
				t.Fatalf("%q re-rendered: %v, was %v", text, again, ls)
			}
		}
	})
}

// FuzzParseReply: any reply shape built from the fuzzer's integers reads to a result or
// an error; never a panic; a result has one verdict per window and a governing index in
// range.
func FuzzParseReply(f *testing.F) {
	f.Add(int64(1), int64(1), int64(3), int64(2), int64(-1), int64(11), uint8(6), uint8(1))
	f.Add(int64(0), int64(2), int64(2), int64(0), int64(2), int64(51), uint8(7), uint8(2))
	f.Fuzz(func(t *testing.T, a, b, c, d, e, g int64, n, windows uint8) {
		vals := []int64{a, b, c, d, e, g}
		var reply []any
		for i := 0; i < int(n%8); i++ {
			if i < 6 {
				reply = append(reply, vals[i])
			} else {
				var per []any
				for w := 0; w < int(windows%4); w++ {
					per = append(per, []any{int64(w + 1), c, b, d, e, g})
				}
				reply = append(reply, per)
			}
		}
		ws := make([]uint64, int(windows%4))
		for i := range ws {
			ws[i] = uint64(i + 1)
		}
		if len(ws) == 0 {
			ws = []uint64{1}
		}
		m, err := ParseReply(reply, ws, 1, false)
		if err != nil {
			return
		}
		if len(m.Limits) != len(ws) || m.Governing < 0 || m.Governing >= len(m.Limits) {
			t.Fatalf("%v: %+v", reply, m)
		}
	})
}
