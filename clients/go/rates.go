package slidingwindow

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// MaxLimits is the most limits one call may carry.
const MaxLimits = 8

// Limit is one limit: at most Limit units of cost per Window (in the call's unit:
// seconds, or milliseconds with MS; rate strings give milliseconds).
type Limit struct {
	Limit  uint64
	Window uint64
}

// RateError is a rate string that does not parse; its message names the part.
type RateError struct{ Msg string }

func (e *RateError) Error() string { return e.Msg }

const rateHint = `write e.g. "10/second", "1000 per hour" or "100/5 minutes"`

var rateUnits = []struct {
	name    string
	seconds uint64
}{{"second", 1}, {"minute", 60}, {"hour", 3600}, {"day", 86400}}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isAlpha(c byte) bool { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') }

func leadingDigits(s string) (string, string) {
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	return s[:i], s[i:]
}

func trimSpace(s string) string { return strings.TrimSpace(s) }

func trimLeft(s string) string { return strings.TrimLeftFunc(s, unicode.IsSpace) }

func unitSeconds(word, item, text string) (uint64, error) {
	lower := strings.ToLower(word)
	name := lower
	if s, ok := strings.CutSuffix(name, "s"); ok {
		for _, u := range rateUnits {
			if u.name == s {
				name = s
			}
		}
	}
	for _, u := range rateUnits {
		if u.name == name {
			return u.seconds, nil
		}
	}
	bare := strings.TrimRight(lower, "s")
	why := fmt.Sprintf("unknown unit '%s' (second, minute, hour or day)", word)
	if bare == "month" || bare == "year" {
		why = fmt.Sprintf("'%s' windows vary in length: use days (e.g. 30 days)", word)
	}
	return 0, &RateError{fmt.Sprintf("bad rate '%s' in '%s': %s", item, text, why)}
}

func parseRate(item, text string) (Limit, error) {
	item = trimSpace(item)
	bad := &RateError{fmt.Sprintf("bad rate '%s' in '%s': %s", item, text, rateHint)}
	count, rest := leadingDigits(item)
	if count == "" {
		return Limit{}, bad
	}
	rest = trimLeft(rest)
	switch {
	case strings.HasPrefix(rest, "/"):
		rest = rest[1:]
	case len(rest) >= 3 && strings.EqualFold(rest[:3], "per"):
		after := rest[3:]
		if after != "" && (isAlpha(after[0]) || isDigit(after[0]) || after[0] == '_') {
			return Limit{}, bad
		}
		rest = after
	default:
		return Limit{}, bad
	}
	rest = trimLeft(rest)
	mult, rest := leadingDigits(rest)
	rest = trimLeft(rest)
	if rest == "" {
		return Limit{}, bad
	}
	for i := 0; i < len(rest); i++ {
		if !isAlpha(rest[i]) {
			return Limit{}, bad
		}
	}
	limit, err := strconv.ParseUint(count, 10, 64)
	if err != nil {
		return Limit{}, bad
	}
	n := uint64(1)
	if mult != "" {
		if n, err = strconv.ParseUint(mult, 10, 64); err != nil {
			return Limit{}, bad
		}
	}
	if n < 1 {
		return Limit{}, &RateError{fmt.Sprintf("bad rate '%s' in '%s': the window must be >= 1", item, text)}
	}
	seconds, err := unitSeconds(rest, item, text)
	if err != nil {
		return Limit{}, err
	}
	if n > (^uint64(0))/seconds/1000 {
		return Limit{}, bad
	}
	return Limit{Limit: limit, Window: n * seconds * 1000}, nil
}

// ParseLimits reads a rate string ("10/second;1000/hour", "5 per minute", "100/5
// minutes"; separators ; , |) into limits with windows in milliseconds.
func ParseLimits(text string) ([]Limit, error) {
	var items []string
	for _, it := range strings.FieldsFunc(text, func(r rune) bool { return r == ';' || r == ',' || r == '|' }) {
		if trimSpace(it) != "" {
			items = append(items, it)
		}
	}
	if len(items) == 0 {
		return nil, &RateError{fmt.Sprintf("no rate in '%s': %s", text, rateHint)}
	}
	rates := make([]Limit, 0, len(items))
	for _, it := range items {
		r, err := parseRate(it, text)
		if err != nil {
			return nil, err
		}
		rates = append(rates, r)
	}
	for i, r := range rates {
		for _, o := range rates[:i] {
			if o.Window == r.Window {
				return nil, &RateError{fmt.Sprintf("two rates with the same window in '%s': %s and %s; keep one (the smaller limit is the one that applies)", text, describeLimit(o), describeLimit(r))}
			}
		}
	}
	if len(rates) > MaxLimits {
		return nil, &RateError{fmt.Sprintf("%d rates in '%s': at most %d per policy", len(rates), text, MaxLimits)}
	}
	return rates, nil
}

func describeLimit(l Limit) string {
	seconds := l.Window / 1000
	for i := len(rateUnits) - 1; i >= 0; i-- {
		u := rateUnits[i]
		if l.Window%1000 == 0 && seconds%u.seconds == 0 {
			n := seconds / u.seconds
			if n == 1 {
				return fmt.Sprintf("%d per %s", l.Limit, u.name)
			}
			return fmt.Sprintf("%d per %d %ss", l.Limit, n, u.name)
		}
	}
	return fmt.Sprintf("%d per %d ms", l.Limit, l.Window)
}
