package slidingwindow

import (
	"errors"
	"fmt"
	"strconv"
)

// Call is what one Check, Peek or Refund asks: one or several limits, a cost, the unit
// and the clock. Build it with NewCall or Rates and the methods below; a Call is a value
// and each method returns a changed copy.
type Call struct {
	limits     []Limit
	cost       uint64
	ms         bool
	now        uint64
	hasNow     bool
	rateString bool
	conflict   bool
}

// NewCall is one limit: at most limit per window (seconds; milliseconds after MS()).
func NewCall(limit, window uint64) Call {
	return Call{limits: []Limit{{limit, window}}, cost: 1}
}

// Limits is a call on the given limits, in order (the first is the one sent positionally).
func Limits(limits ...Limit) Call {
	return Call{limits: append([]Limit(nil), limits...), cost: 1}
}

// Rates is a call on a rate string ("10/second;1000/hour"): windows in milliseconds,
// sent with MS.
func Rates(text string) (Call, error) {
	l, err := ParseLimits(text)
	if err != nil {
		return Call{}, err
	}
	return Call{limits: l, cost: 1, ms: true, rateString: true}, nil
}

// And adds a further limit.
func (c Call) And(limit, window uint64) Call {
	c.limits = append(append([]Limit(nil), c.limits...), Limit{limit, window})
	return c
}

// MS makes the windows, now and the answers' times milliseconds. A rate string carries
// its own unit: MS on one is an error when the call is made.
func (c Call) MS() Call {
	if c.rateString {
		c.conflict = true
	}
	c.ms = true
	return c
}

// Cost makes the request count cost units (default 1; at least 1).
func (c Call) Cost(cost uint64) Call { c.cost = cost; return c }

// At decides at an explicit instant (in the call's unit) instead of the server's clock.
func (c Call) At(now uint64) Call { c.now, c.hasNow = now, true; return c }

// LimitList is the call's limits in order.
func (c Call) LimitList() []Limit { return append([]Limit(nil), c.limits...) }

// IsMS reports whether the call is in milliseconds.
func (c Call) IsMS() bool { return c.ms }

// CostValue is the call's cost.
func (c Call) CostValue() uint64 { return c.cost }

// Now is the call's explicit instant, if any.
func (c Call) Now() (uint64, bool) { return c.now, c.hasNow }

// ErrInvalidArgument is wrapped by every argument error found before any I/O.
var ErrInvalidArgument = errors.New("slidingwindow: invalid argument")

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, a...))
}

func (c Call) validate() error {
	if c.conflict {
		return invalid("a rate string carries its own unit (ms): give (limit, window) pairs with ms")
	}
	if len(c.limits) == 0 {
		return invalid("no limit given")
	}
	if len(c.limits) > MaxLimits {
		return invalid("%d limits: at most %d per call", len(c.limits), MaxLimits)
	}
	if c.cost == 0 {
		return invalid("cost must be at least 1")
	}
	return nil
}

func u64(n uint64) string { return strconv.FormatUint(n, 10) }

func (c Call) args() []string {
	first := c.limits[0]
	args := make([]string, 0, 4+3*len(c.limits))
	args = append(args, u64(first.Limit), u64(first.Window))
	if c.hasNow {
		args = append(args, u64(c.now))
	}
	for _, l := range c.limits[1:] {
		args = append(args, "LIMIT", u64(l.Limit), u64(l.Window))
	}
	if c.cost != 1 {
		args = append(args, "COST", u64(c.cost))
	}
	if c.ms {
		args = append(args, "MS")
	}
	return append(args, "DETAILS")
}

func (c Call) windows() []uint64 {
	w := make([]uint64, len(c.limits))
	for i, l := range c.limits {
		w[i] = l.Window
	}
	return w
}
