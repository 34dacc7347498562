package slidingwindow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
)

// Backend says which server-side code a limiter uses.
type Backend int

const (
	// Auto: the module when the server has it, else the bundled Functions library
	// (loaded when allowed), else EVALSHA/EVAL where the server has no FUNCTION (6.2).
	Auto Backend = iota
	// Module: the module's SLIDINGWINDOW.* commands only.
	Module
	// Library: the Functions library only (FCALL, or EVALSHA on Redis 6.2).
	Library
)

// Mode is what a limiter sends, once decided.
type Mode int

const (
	ModeUnknown  Mode = iota
	ModeModule        // SLIDINGWINDOW.CHECK key ...
	ModeFunction      // FCALL slidingwindow_check 1 key ... (FCALL_RO for peek, counts)
	ModeEval          // EVALSHA <sha> 1 key slidingwindow_check ... (EVAL on NOSCRIPT)
)

type op int

const (
	opCheck op = iota
	opPeek
	opRefund
	opCounts
)

var opCommands = [...]string{"SLIDINGWINDOW.CHECK", "SLIDINGWINDOW.PEEK", "SLIDINGWINDOW.REFUND", "SLIDINGWINDOW.COUNTS"}
var opFunctions = [...]string{"slidingwindow_check", "slidingwindow_peek", "slidingwindow_refund", "slidingwindow_counts"}

func (o op) readonly() bool { return o == opPeek || o == opCounts }

type wire struct {
	op   op
	key  string
	args []string
}

func (w wire) command(m Mode) []string {
	var c []string
	switch m {
	case ModeModule:
		c = append(make([]string, 0, len(w.args)+2), opCommands[w.op], w.key)
	case ModeFunction:
		name := "FCALL"
		if w.op.readonly() {
			name = "FCALL_RO"
		}
		c = append(make([]string, 0, len(w.args)+4), name, opFunctions[w.op], "1", w.key)
	default:
		c = append(make([]string, 0, len(w.args)+5), "EVALSHA", librarySHA, "1", w.key, opFunctions[w.op])
	}
	return append(c, w.args...)
}

func (w wire) eval() []string {
	return append([]string{"EVAL", libraryBody, "1", w.key, opFunctions[w.op]}, w.args...)
}

func serverErr(err error) *ServerError {
	var se *ServerError
	if errors.As(err, &se) {
		return se
	}
	return nil
}

func unknownCommand(err error, name string) bool {
	se := serverErr(err)
	if se == nil {
		return false
	}
	t := strings.ToLower(se.Msg)
	return strings.Contains(t, strings.ToLower(name)) && (strings.Contains(t, "unknown command") || strings.Contains(t, "command doesn't exist"))
}

func functionMissing(err error) bool {
	se := serverErr(err)
	return se != nil && strings.Contains(strings.ToLower(se.Msg), "function not found")
}

func hasCode(err error, code string) bool {
	se := serverErr(err)
	return se != nil && se.Code() == code
}

type chooser struct {
	choice     Backend
	mu         sync.Mutex
	mode       Mode
	generation atomic.Uint64
	detect     sync.Mutex
	detections atomic.Uint64
	loads      atomic.Uint64
	warnedOld  atomic.Bool
	logs       logs
}

func newChooser(b Backend) *chooser {
	c := &chooser{choice: b}
	if b != Library {
		c.mode = ModeModule // Auto tries the module first: its first call is the call itself
	}
	return c
}

func (c *chooser) current() Mode {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mode
}

// call sends w in the decided mode, looking for the library again where the module or
// the library is gone (FUNCTION FLUSH, a restart or failover onto a server without it),
// and sending EVAL once on NOSCRIPT.
func (c *chooser) call(ctx context.Context, conn Conn, w wire) (any, error) {
	gen := c.generation.Load()
	mode := c.current()
	if mode == ModeUnknown {
		var err error
		if mode, err = c.findLibrary(ctx, conn, gen); err != nil {
			return nil, err
		}
	}
	for attempt := 1; ; attempt++ {
		v, err := conn.Do(ctx, w.key, w.command(mode)...)
		if err == nil {
			return v, nil
		}
		if mode == ModeEval && hasCode(err, "NOSCRIPT") {
			v, err = conn.Do(ctx, w.key, w.eval()...)
			if err == nil {
				return v, nil
			}
			return nil, c.explain(ctx, conn, w, mode, err)
		}
		if attempt == 2 || !c.gone(err, mode) {
			return nil, c.explain(ctx, conn, w, mode, err)
		}
		c.mu.Lock()
		if gen == c.generation.Load() {
			c.mode = ModeUnknown
		}
		c.mu.Unlock()
		if mode, err = c.findLibrary(ctx, conn, gen); err != nil {
			return nil, err
		}
		gen = c.generation.Load()
	}
}

func (c *chooser) gone(err error, mode Mode) bool {
	switch mode {
	case ModeModule:
		return c.choice == Auto && unknownCommand(err, "slidingwindow.")
	case ModeFunction:
		return functionMissing(err) || unknownCommand(err, "fcall")
	}
	return false
}

func (c *chooser) findLibrary(ctx context.Context, conn Conn, seen uint64) (Mode, error) {
	c.detect.Lock()
	defer c.detect.Unlock()
	if c.generation.Load() != seen {
		if m := c.current(); m != ModeUnknown {
			return m, nil
		}
	}
	m, err := c.detectNow(ctx, conn)
	if err != nil {
		return ModeUnknown, err
	}
	c.mu.Lock()
	c.mode = m
	c.mu.Unlock()
	c.generation.Add(1)
	return m, nil
}

func notLoaded(cause error) error {
	return &LibraryNotLoadedError{Msg: fmt.Sprintf("slidingwindow: the slidingwindow module is not on this server and the slidingwindow library %s is not loaded, and this user may not load it (%v). An operator loads it once, on every primary: %s (lua/slidingwindow.lua of the repository, also shipped in the Go module as slidingwindow.lua)", libraryVersion, cause, LibraryLoadCommand)}
}

func (c *chooser) detectNow(ctx context.Context, conn Conn) (Mode, error) {
	c.detections.Add(1)
	replies, err := conn.DoAll(ctx, "FCALL_RO", "slidingwindow_version", "0")
	if err != nil {
		return ModeUnknown, err
	}
	load, everyHasOne, oldest := false, true, ""
	for _, r := range replies {
		switch {
		case r.Err == nil:
			v, ok := r.Value.(string)
			if !ok {
				return ModeUnknown, &ReplyError{fmt.Sprintf("slidingwindow_version: %#v", r.Value)}
			}
			if libraryIsOlder(v) {
				load, oldest = true, v
			}
		case unknownCommand(r.Err, "fcall_ro"):
			return ModeEval, nil
		case refusal(r.Err) != refusedNone:
			return ModeUnknown, permissionError(r.Err, refusal(r.Err), ModeFunction, "", nil)
		case functionMissing(r.Err):
			load, everyHasOne = true, false
		default:
			return ModeUnknown, r.Err
		}
	}
	if !load {
		return ModeFunction, nil
	}
	replies, err = conn.DoAll(ctx, "FUNCTION", "LOAD", "REPLACE", LibraryCode)
	if err != nil {
		return ModeUnknown, err
	}
	for _, r := range replies {
		switch {
		case r.Err == nil:
		case hasCode(r.Err, "NOPERM") && everyHasOne:
			if !c.warnedOld.Swap(true) {
				c.logs.emit(slog.LevelWarn, func() string {
					return fmt.Sprintf("slidingwindow: the loaded slidingwindow library %s is older than this module's %s and this user may not replace it (%v); using it as it is. An operator replaces it: %s", oldest, libraryVersion, r.Err, LibraryLoadCommand)
				}, "slidingwindow: the loaded library is older and may not be replaced; using it as it is", "loaded", oldest, "bundled", libraryVersion, "error", r.Err.Error(), "load_command", LibraryLoadCommand)
			}
			return ModeFunction, nil
		case hasCode(r.Err, "NOPERM"):
			return ModeUnknown, notLoaded(r.Err)
		case unknownCommand(r.Err, "function"):
			return ModeEval, nil
		case hasCode(r.Err, "READONLY"):
			// a replica listed among the nodes: it copies its primary's library
		default:
			return ModeUnknown, r.Err
		}
	}
	c.loads.Add(1)
	return ModeFunction, nil
}

func (c *chooser) explain(ctx context.Context, conn Conn, w wire, mode Mode, err error) error {
	kind := refusal(err)
	if kind == refusedNone {
		return err
	}
	var listed []string
	if mode == ModeFunction && kind != refusedKey {
		if v, e := conn.Do(ctx, w.key, "FCALL_RO", "slidingwindow_permissions", "1", w.key); e == nil {
			if items, ok := v.([]any); ok {
				listed = []string{}
				for _, it := range items {
					if s, ok := it.(string); ok {
						listed = append(listed, s)
					}
				}
			}
		}
	}
	return permissionError(err, kind, mode, w.key, listed)
}

// The commands the library runs, and the least-privilege lines for its user.
var (
	LibraryCommands   = []string{"time", "get", "set", "pexpiretime", "pexpireat"}
	LibraryCommands62 = []string{"time", "get", "set", "pttl"}
)

const (
	LibraryACLLine   = "ACL SETUSER app on >secret ~rate:* +fcall +fcall_ro +time +get +set +pexpiretime +pexpireat"
	LibraryACLLine62 = "ACL SETUSER app on >secret ~rate:* +evalsha +eval +time +get +set +pttl"
)

type refused int

const (
	refusedNone refused = iota
	refusedScript
	refusedKey
	refusedCommand
)

func namedCommand(msg string) string {
	const mark = "permissions to run the '"
	i := strings.Index(msg, mark)
	if i < 0 {
		return ""
	}
	rest := msg[i+len(mark):]
	j := strings.IndexByte(rest, '\'')
	if j < 0 {
		return ""
	}
	return strings.ToLower(rest[:j])
}

func refusal(err error) refused {
	se := serverErr(err)
	if se == nil {
		return refusedNone
	}
	lower := strings.ToLower(se.Msg)
	if strings.Contains(lower, "the user executing the script can't run this command") || strings.Contains(lower, "acl failure in script") {
		return refusedScript
	}
	if se.Code() == "NOPERM" {
		if strings.Contains(lower, "permissions to access one of the keys") || strings.Contains(lower, "no permissions to access a key") {
			return refusedKey
		}
		if namedCommand(se.Msg) != "" {
			return refusedCommand
		}
	}
	return refusedNone
}

func aclUser(msg string) string {
	f := strings.Fields(msg)
	for i := 0; i+3 < len(f); i++ {
		if f[i] == "User" && f[i+2] == "has" && f[i+3] == "no" {
			return f[i+1]
		}
	}
	return "<user>"
}

func permissionError(err error, kind refused, mode Mode, key string, listed []string) error {
	msg := err.Error()
	user := aclUser(msg)
	whole, line := LibraryCommands, LibraryACLLine
	if mode == ModeEval {
		whole, line = LibraryCommands62, LibraryACLLine62
	}
	if kind == refusedKey {
		return &MissingPermissionError{Commands: []string{}, Msg: fmt.Sprintf("%s -- the Redis user may not access the key '%s': add the limiter's key prefix to its key patterns, ACL SETUSER %s ~<prefix>* (the clients' default prefix is rate:); the least-privilege line: %s", msg, key, user, line)}
	}
	var commands []string
	switch {
	case kind == refusedCommand:
		commands = []string{namedCommand(msg)}
		for _, m := range listed {
			m = strings.ToLower(m)
			if !contains(commands, m) {
				commands = append(commands, m)
			}
		}
	case mode == ModeEval || len(listed) == 0:
		commands = append([]string(nil), whole...)
	default:
		for _, m := range listed {
			commands = append(commands, strings.ToLower(m))
		}
	}
	grant := make([]string, len(commands))
	allModule := true
	for i, c := range commands {
		grant[i] = "+" + c
		allModule = allModule && strings.HasPrefix(c, "slidingwindow.")
	}
	advice := "the library's least-privilege line (README.md, ACL): " + line
	if mode == ModeModule && allModule {
		advice = "the module's lines are in README.md, ACL (+@read +@write on Redis 7.2+ and Valkey; the commands by name on Redis 7.0)"
	} else if mode == ModeEval && kind == refusedScript {
		advice = "Redis 6.2 cannot say which of them is missing; " + advice
	}
	them := "them"
	if len(commands) == 1 {
		them = "it"
	}
	return &MissingPermissionError{Commands: commands, Msg: fmt.Sprintf("%s -- the Redis user may not run %s. Grant %s: ACL SETUSER %s %s; %s", msg, strings.Join(commands, ", "), them, user, strings.Join(grant, " "), advice)}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
