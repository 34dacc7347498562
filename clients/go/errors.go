package slidingwindow

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ServerError is an error reply from Redis (adapters return server errors as this type;
// everything else a Conn returns is a connection problem).
type ServerError struct{ Msg string }

func (e *ServerError) Error() string { return e.Msg }

// Code is the reply's first word ("ERR", "NOSCRIPT", "NOPERM", ...).
func (e *ServerError) Code() string {
	code, _, _ := strings.Cut(e.Msg, " ")
	return code
}

// TimeoutError is a call without a reply within the limiter's timeout (or the context's
// deadline): an outage.
type TimeoutError struct{ Timeout time.Duration }

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("slidingwindow: no reply from Redis within %d ms", e.Timeout.Milliseconds())
}

// LibraryNotLoadedError: neither the module nor the library is on the server, and this
// user may not load the library. A configuration error: returned, the circuit never opens.
type LibraryNotLoadedError struct{ Msg string }

func (e *LibraryNotLoadedError) Error() string { return e.Msg }

// MissingPermissionError: a call refused by ACL, inside the library or the command
// itself. Commands names what the user lacks; the message says what to grant.
type MissingPermissionError struct {
	Commands []string
	Msg      string
}

func (e *MissingPermissionError) Error() string { return e.Msg }

var configCodes = map[string]bool{"NOAUTH": true, "WRONGPASS": true, "NOPERM": true}
var outageCodes = map[string]bool{"LOADING": true, "READONLY": true, "MASTERDOWN": true, "CLUSTERDOWN": true, "OOM": true, "TRYAGAIN": true}

// IsOutage reports whether err means Redis could not answer (a refused or lost
// connection, a timeout, LOADING, READONLY, MASTERDOWN, CLUSTERDOWN, OOM, TRYAGAIN):
// the calls the limiter answers without Redis. Argument, permission and library errors
// are not outages, and neither is the caller's own cancellation.
func IsOutage(err error) bool {
	if err == nil {
		return false
	}
	var se *ServerError
	if errors.As(err, &se) {
		c := se.Code()
		return !configCodes[c] && outageCodes[c]
	}
	var te *TimeoutError
	if errors.As(err, &te) {
		return true
	}
	var ln *LibraryNotLoadedError
	var mp *MissingPermissionError
	var re *ReplyError
	var ra *RateError
	if errors.As(err, &ln) || errors.As(err, &mp) || errors.As(err, &re) || errors.As(err, &ra) ||
		errors.Is(err, ErrInvalidArgument) || errors.Is(err, context.Canceled) {
		return false
	}
	return true
}
