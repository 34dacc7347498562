package slidingwindow

// Replays every vector of the repository's conformance/ (commands, replies, headers,
// identity, rates) through this module's real code: the limiter on a scripted Conn, the
// header and identity helpers, the rate-string parser. With the self-check: one leaf of
// each expected part changed must mismatch.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

func conformanceDir() string {
	if r := os.Getenv("SLIDINGWINDOW_REPO"); r != "" {
		return filepath.Join(r, "conformance")
	}
	return filepath.Join("..", "..", "conformance")
}

type jcase = map[string]any

func cases(t *testing.T, file string) []jcase {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(conformanceDir(), file))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ Cases []jcase }
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if len(doc.Cases) == 0 {
		t.Fatalf("%s: no cases", file)
	}
	return doc.Cases
}

// asJSON is v as encoding/json reads it back (numbers float64, maps map[string]any).
func asJSON(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// mutated is v with one leaf changed (the first found, map keys in order), as the
// README's self-check asks.
func mutated(v any) any {
	var walk func(v any) (any, bool)
	walk = func(v any) (any, bool) {
		switch x := v.(type) {
		case bool:
			return !x, true
		case float64:
			return x + 1, true
		case string:
			return x + "x", true
		case nil:
			return "x", true
		case []any:
			if len(x) == 0 {
				return []any{1.0}, true
			}
			c := slices.Clone(x)
			for i := range c {
				if n, ok := walk(c[i]); ok {
					c[i] = n
					return c, true
				}
			}
		case map[string]any:
			if len(x) == 0 {
				return map[string]any{"x": 1.0}, true
			}
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			c := make(map[string]any, len(x))
			for k, e := range x {
				c[k] = e
			}
			for _, k := range keys {
				if n, ok := walk(c[k]); ok {
					c[k] = n
					return c, true
				}
			}
		}
		return v, false
	}
	m, ok := walk(v)
	if !ok {
		panic(fmt.Sprintf("nothing to mutate in %#v", v))
	}
	return m
}

func compare(t *testing.T, got, want any) {
	t.Helper()
	got = asJSON(t, got)
	want = asJSON(t, want)
	if !reflect.DeepEqual(got, want) {
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		t.Errorf("mismatch\n got  %s\n want %s", g, w)
	}
	if reflect.DeepEqual(got, mutated(want)) {
		t.Errorf("self-check: the mutated expectation was not reported")
	}
}

func num(v any) uint64 { f, _ := v.(float64); return uint64(f) }

func oneJSON(r RateLimitResult) map[string]any {
	var retry any
	if s, ok := r.RetryAfterSeconds(); ok {
		retry = s
	}
	return map[string]any{
		"allowed": r.Allowed, "count": r.Count, "limit": r.Limit, "remaining": r.Remaining,
		"retry_after": r.RetryAfter, "reset_after": r.ResetAfter, "window": r.Window, "ms": r.MS,
		"degraded": r.Degraded, "retry_after_seconds": retry,
		"reset_after_seconds": r.ResetAfterSeconds(), "window_seconds": r.WindowSeconds(),
	}
}

func multiJSON(m *MultiLimitResult) map[string]any {
	ls := make([]any, len(m.Limits))
	for i, r := range m.Limits {
		ls[i] = oneJSON(r)
	}
	return map[string]any{"summary": oneJSON(m.Summary), "limits": ls, "governing": m.Governing}
}

func resultFrom(j map[string]any) RateLimitResult {
	ra, _ := j["retry_after"].(float64)
	return RateLimitResult{
		Allowed: j["allowed"] == true, Count: num(j["count"]), Limit: num(j["limit"]),
		Remaining: num(j["remaining"]), RetryAfter: int64(ra), ResetAfter: num(j["reset_after"]),
		Window: num(j["window"]), MS: j["ms"] == true, Degraded: j["degraded"] == true,
	}
}

func headerMap(h []Header) map[string]any {
	m := map[string]any{}
	for _, x := range h {
		if _, dup := m[x.Name]; dup {
			panic("header twice: " + x.Name)
		}
		m[x.Name] = x.Value
	}
	return m
}

func TestConformanceHeaders(t *testing.T) {
	for _, c := range cases(t, "headers.json") {
		t.Run(c["id"].(string), func(t *testing.T) {
			policy, _ := c["policy"].(string)
			if policy == "" {
				policy = "default"
			}
			res := c["result"].(map[string]any)
			var got []Header
			if s, ok := res["summary"].(map[string]any); ok {
				m := &MultiLimitResult{Summary: resultFrom(s), Governing: int(num(res["governing"]))}
				for _, l := range res["limits"].([]any) {
					m.Limits = append(m.Limits, resultFrom(l.(map[string]any)))
				}
				got = LimitsHeaders(m, policy)
			} else {
				got = RateLimitHeaders(resultFrom(res), policy)
			}
			compare(t, headerMap(got), c["headers"])
		})
	}
}

func TestConformanceIdentity(t *testing.T) {
	for _, c := range cases(t, "identity.json") {
		t.Run(c["id"].(string), func(t *testing.T) {
			h := http.Header{}
			if hs, ok := c["headers"].(map[string]any); ok {
				for name, lines := range hs {
					for _, l := range lines.([]any) {
						h.Add(name, l.(string))
					}
				}
			}
			var nets []string
			if tp, ok := c["trusted_proxies"].([]any); ok {
				for _, n := range tp {
					nets = append(nets, n.(string))
				}
			}
			trusted, err := NewTrustedProxies(nets...)
			if err != nil {
				t.Fatal(err)
			}
			var o IdentityOptions
			if opts, ok := c["options"].(map[string]any); ok {
				o.APIKeyHeader, _ = opts["api_key_header"].(string)
				if keys, ok := opts["api_keys"].([]any); ok {
					var ks []string
					for _, k := range keys {
						ks = append(ks, k.(string))
					}
					o.APIKeys = AcceptKeys(ks...)
				}
				o.User, _ = opts["user"].(string)
				o.IPv6Prefix = int(num(opts["ipv6_prefix"]))
				o.ByIP = opts["by_ip"] == true
			}
			peer, _ := c["peer"].(string)
			id, ip, ok := ClientIdentity(h, peer, trusted, o)
			var gotIP any
			if ok {
				gotIP = ip.String()
			}
			compare(t, map[string]any{"client_ip": gotIP, "identity": id},
				map[string]any{"client_ip": c["client_ip"], "identity": c["identity"]})
		})
	}
}

func TestConformanceRates(t *testing.T) {
	for i, c := range cases(t, "rates.json") {
		text := c["text"].(string)
		name, _ := c["id"].(string)
		if name == "" {
			name = fmt.Sprintf("%d:%q", i, text)
		}
		t.Run(name, func(t *testing.T) {
			var got []Limit
			var err error
			if c["ms"] == true {
				var call Call
				if call, err = Rates(text); err == nil {
					call = call.MS()
					if err = call.validate(); err == nil {
						got = call.LimitList()
					}
				}
			} else {
				got, err = ParseLimits(text)
			}
			if want, ok := c["limits"].([]any); ok {
				if err != nil {
					t.Fatalf("%q: %v", text, err)
				}
				pairs := make([]any, len(got))
				for i, l := range got {
					pairs[i] = []any{l.Limit, l.Window}
				}
				compare(t, pairs, want)
				return
			}
			frag := c["message"].(string)
			if err == nil {
				t.Fatalf("%q: parsed to %v, want an error with %q", text, got, frag)
			}
			if !strings.Contains(err.Error(), frag) {
				t.Errorf("%q: %q lacks %q", text, err, frag)
			}
			if strings.Contains(err.Error(), frag+"x") {
				t.Errorf("%q: self-check", text)
			}
		})
	}
}

// scripted is a Conn playing one kind of server: "module", "function" (Redis 7 with the
// library) or "eval" (Redis 6.2). It records the commands that carry a call and answers
// them with reply (nil: a connection error, an outage).
type scripted struct {
	server string
	reply  any
	mu     sync.Mutex
	sent   [][]string
}

var errRefused = errors.New("dial tcp 127.0.0.1:1: connect: connection refused")

func toReply(v any) any {
	switch x := v.(type) {
	case float64:
		return int64(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = toReply(e)
		}
		return out
	}
	return v
}

func unknown(name string) error {
	return &ServerError{Msg: fmt.Sprintf("ERR unknown command '%s', with args beginning with: ", name)}
}

func (s *scripted) Do(_ context.Context, _ string, args ...string) (any, error) {
	name := strings.ToUpper(args[0])
	carries := false
	switch {
	case strings.HasPrefix(name, "SLIDINGWINDOW."):
		if s.server != "module" {
			return nil, unknown(args[0])
		}
		carries = true
	case name == "FCALL" || name == "FCALL_RO":
		if s.server == "eval" {
			return nil, unknown(args[0])
		}
		carries = true
	case name == "EVALSHA" || name == "EVAL":
		carries = true
	}
	if !carries {
		return nil, &ServerError{Msg: "ERR unexpected " + name}
	}
	s.mu.Lock()
	s.sent = append(s.sent, slices.Clone(args))
	s.mu.Unlock()
	if s.reply == nil {
		return nil, errRefused
	}
	return toReply(s.reply), nil
}

func (s *scripted) DoAll(_ context.Context, args ...string) ([]Reply, error) {
	name := strings.ToUpper(args[0])
	switch {
	case s.server == "eval" && (name == "FCALL_RO" || name == "FUNCTION"):
		return []Reply{{Err: unknown(args[0])}}, nil
	case name == "FCALL_RO" && args[1] == "slidingwindow_version":
		return []Reply{{Value: LibraryVersion()}}, nil
	case name == "FUNCTION":
		return []Reply{{Value: "OK"}}, nil
	}
	return []Reply{{Err: &ServerError{Msg: "ERR unexpected " + name}}}, nil
}

func (s *scripted) IsCluster() bool { return false }

// drive makes the case's call on l and returns its answer in replies.json's form.
func drive(t *testing.T, l *Limiter, c jcase) (any, error) {
	ctx := context.Background()
	id := c["client_id"].(string)
	opts, _ := c["options"].(map[string]any)
	var now []uint64
	if n, ok := opts["now"].(float64); ok {
		now = []uint64{uint64(n)}
	}
	ms := opts["ms"] == true
	callName := c["call"].(string)
	switch callName {
	case "is_allowed":
		lim := c["limits"].([]any)[0].([]any)
		ok, count, err := l.IsAllowed(ctx, id, num(lim[0]), num(lim[1]), now...)
		return map[string]any{"allowed": ok, "count": count}, err
	case "counts":
		wc, err := l.Counts(ctx, id, num(c["window"]), ms, now...)
		return map[string]any{"previous": wc.Previous, "current": wc.Current, "elapsed": wc.Elapsed, "degraded": wc.Degraded}, err
	}
	var ls []Limit
	for _, p := range c["limits"].([]any) {
		pair := p.([]any)
		ls = append(ls, Limit{num(pair[0]), num(pair[1])})
	}
	call := Limits(ls...)
	if ms {
		call = call.MS()
	}
	if cost, ok := opts["cost"].(float64); ok {
		call = call.Cost(uint64(cost))
	}
	if len(now) > 0 {
		call = call.At(now[0])
	}
	var m *MultiLimitResult
	var err error
	switch strings.TrimSuffix(callName, "_limits") {
	case "check":
		m, err = l.Check(ctx, id, call)
	case "peek":
		m, err = l.Peek(ctx, id, call)
	case "refund":
		m, err = l.Refund(ctx, id, call)
	default:
		t.Fatalf("unknown call %q", callName)
	}
	if err != nil {
		return nil, err
	}
	if strings.HasSuffix(callName, "_limits") {
		return multiJSON(m), nil
	}
	return oneJSON(m.Summary), nil
}

func limiterFor(c jcase, s *scripted) *Limiter {
	o := Options{}
	if p, ok := c["prefix"].(string); ok {
		o.Prefix, o.NoPrefix = p, p == ""
	}
	if c["fail_open"] == false {
		o.FailClosed = true
	}
	return New(s, o)
}

func TestConformanceCommands(t *testing.T) {
	for _, c := range cases(t, "commands.json") {
		t.Run(c["id"].(string), func(t *testing.T) {
			got := map[string]any{}
			for server, field := range map[string]string{"module": "module", "function": "fcall", "eval": "evalsha"} {
				s := &scripted{server: server, reply: []any{}}
				if _, ok := c[field]; !ok {
					t.Fatalf("no %s", field)
				}
				_, _ = drive(t, limiterFor(c, s), c)
				if len(s.sent) != 1 {
					t.Fatalf("%s: sent %d commands carrying the call: %v", server, len(s.sent), s.sent)
				}
				cmd := make([]any, len(s.sent[0]))
				for i, a := range s.sent[0] {
					if a == LibrarySHA() {
						a = "$SHA"
					}
					cmd[i] = a
				}
				got[field] = cmd
			}
			compare(t, got, map[string]any{"module": c["module"], "fcall": c["fcall"], "evalsha": c["evalsha"]})
		})
	}
}

func TestConformanceReplies(t *testing.T) {
	for _, c := range cases(t, "replies.json") {
		t.Run(c["id"].(string), func(t *testing.T) {
			s := &scripted{server: "module", reply: c["reply"]}
			got, err := drive(t, limiterFor(c, s), c)
			if err != nil {
				t.Fatalf("%v", err)
			}
			compare(t, got, c["result"])
		})
	}
}

func TestConformanceEveryFileHasADriver(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(conformanceDir(), "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	want := []string{"commands.json", "deny_cache.json", "headers.json", "identity.json", "rates.json", "replies.json"}
	if !slices.Equal(names, want) {
		t.Errorf("conformance files %v, drivers for %v", names, want)
	}
}

func TestConformanceDenyCache(t *testing.T) {
	saved := mono
	t.Cleanup(func() { mono = saved })
	for _, c := range cases(t, "deny_cache.json") {
		t.Run(c["id"].(string), func(t *testing.T) {
			var clock float64 // ms
			mono = func() float64 { return clock / 1000 }
			cfg, _ := c["cache"].(map[string]any)
			maxEntries := DefaultMaxEntries
			if n, ok := cfg["max_entries"].(float64); ok {
				maxEntries = int(n)
			}
			refresh := time.Duration(num(cfg["clock_refresh_ms"])) * time.Millisecond
			cache := NewDenyCache(maxEntries, refresh)
			failOpen := c["fail_open"] != false
			prefix := "rate:"
			if p, ok := c["prefix"].(string); ok {
				prefix = p
			}
			var timeFn func(context.Context) (any, error)
			if off, ok := c["server_offset_ms"].(float64); ok {
				timeFn = func(context.Context) (any, error) {
					us := int64((clock + off) * 1000)
					return []any{fmt.Sprint(us / 1e6), fmt.Sprint(us % 1e6)}, nil
				}
			}
			var got, want []any
			for _, st := range c["steps"].([]any) {
				step := st.(map[string]any)
				clock = step["at_ms"].(float64)
				opts, _ := step["options"].(map[string]any)
				var ls []Limit
				for _, p := range step["limits"].([]any) {
					pair := p.([]any)
					ls = append(ls, Limit{num(pair[0]), num(pair[1])})
				}
				call := Limits(ls...)
				if opts["ms"] == true {
					call = call.MS()
				}
				if cost, ok := opts["cost"].(float64); ok {
					call = call.Cost(uint64(cost))
				}
				if n, ok := opts["now"].(float64); ok {
					call = call.At(uint64(n))
				}
				sent := false
				decide := func(context.Context) (*MultiLimitResult, error) {
					sent = true
					clock += step["latency_ms"].(float64)
					reply, ok := step["redis"]
					switch {
					case !ok:
						return nil, errors.New("sent without a scripted reply")
					case reply == "unavailable":
						return Unavailable(failOpen, call.limits, call.ms), nil
					}
					return ParseReply(toReply(reply), call.windows(), call.cost, call.ms)
				}
				if _, ok := step["latency_ms"]; !ok {
					step["latency_ms"] = 0.0
				}
				name := step["call"].(string)
				s := spec{key: prefix + step["client_id"].(string), limits: call.limits, ms: call.ms, now: call.now, hasNow: call.hasNow, cost: call.cost}
				var m *MultiLimitResult
				var err error
				if strings.HasPrefix(name, "peek") {
					m, err = decide(context.Background())
				} else {
					m, err = cache.run(context.Background(), s, timeFn, strings.HasPrefix(name, "refund"), decide)
				}
				var res any
				switch {
				case err != nil:
					res = map[string]any{"error": err.Error()}
				case strings.HasSuffix(name, "_limits"):
					res = multiJSON(m)
				default:
					res = oneJSON(m.Summary)
				}
				got = append(got, map[string]any{"sent": sent, "result": res})
				want = append(want, step["expect"])
			}
			compare(t, got, want)
		})
	}
}
