// Command bench (make bench-go) measures the Go client's net/http middleware against
// go-chi/httprate with httprate-redis and go-redis/redis_rate v10, in the same app on the
// same Redis:
//
//   - requests/s and p50/p99 at 32 connections, the Redis server time per request (INFO
//     commandstats), and the app's CPU per request at a fixed, unsaturated rate (from
//     /proc), the median of alternating rounds; once with every request allowed and once
//     with 90% of the requests from one refused identity;
//   - overshoot: 64 connections over 8 app processes (8 limiters, one Redis), one
//     identity, 100 per 10 s, for 30 s; every decision judged against an exact sliding log.
//
// Ours runs on a server with the module and once on one without it (the library, loaded
// by the client). Writes bench/results/go.json; bench/readme_blocks.py renders it.
//
//	go run . [-quick] [-out path]
//	go run . serve <variant> <redis addr> <limit> <window s> [log]   (one app; internal)
//	go run . load <port> <seconds>   (32 connections on a running app, e.g. to profile one
//	                                  served with BENCH_PPROF=1 at /debug/pprof/)
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"time"
)

type options struct {
	rounds, conns   int
	duration        time.Duration
	rate            float64
	overshootFor    time.Duration
	overshootWindow int
	overshootOnly   string // run only this variant's overshoot (its decisions still go to target/)
}

// A row: one limiter in one traffic.
type row struct {
	Traffic  string    `json:"traffic"`
	Variant  string    `json:"variant"`
	Server   string    `json:"server"` // module | library
	ReqPerS  []float64 `json:"req_per_sec"`
	P50ms    []float64 `json:"p50_ms"`
	P99ms    []float64 `json:"p99_ms"`
	RedisUs  []float64 `json:"server_usec_per_request"`
	CPUUs    []float64 `json:"cpu_usec_per_request"`
	Refused  []float64 `json:"refused_share"`
	Requests int       `json:"requests"`
}

type overshoot struct {
	Variant string  `json:"variant"`
	Limit   int     `json:"limit"`
	Window  int     `json:"window_s"`
	Seconds float64 `json:"seconds"`
	verdict
}

type report struct {
	Rounds     int         `json:"rounds"`
	Conns      int         `json:"connections"`
	DurationS  float64     `json:"duration_s"`
	Rate       float64     `json:"paced_rate"`
	Cores      int         `json:"cores"`
	Quick      bool        `json:"quick"`
	LoadAvg    string      `json:"load_average"` // at the end of the run
	Rows       []row       `json:"rows,omitempty"`
	Overshoots []overshoot `json:"overshoot,omitempty"`
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		if err := serveArgs(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "serve:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 3 && os.Args[1] == "load" {
		port, err1 := strconv.Atoi(os.Args[2])
		secs, err2 := strconv.Atoi(os.Args[3])
		if err1 != nil || err2 != nil {
			fmt.Fprintln(os.Stderr, "load <port> <seconds>")
			os.Exit(2)
		}
		r, err := load([]int{port}, 32, time.Duration(secs)*time.Second, 0, allowedTraffic)
		fmt.Fprintf(os.Stderr, "%d requests, %.0f req/s, p99 %.2f ms, err %v\n", r.requests, float64(r.requests)/r.seconds, r.p99ms, err)
		return
	}
	quick := flag.Bool("quick", false, "a small run (seconds) that keeps the harness from rotting")
	only := flag.String("overshoot", "", "run only the overshoot, of this variant")
	out := flag.String("out", "", "the JSON to write (default bench/results/go.json; -quick: target/bench-go-quick.json)")
	flag.Parse()
	o := options{rounds: 5, conns: 32, duration: 3 * time.Second, rate: 2000,
		overshootFor: 30 * time.Second, overshootWindow: 10}
	if *quick {
		o = options{rounds: 1, conns: 8, duration: 500 * time.Millisecond, rate: 500,
			overshootFor: 4 * time.Second, overshootWindow: 1}
	}
	if *only != "" {
		o.overshootOnly = *only
	}
	if err := run(o, *quick, *out); err != nil {
		fmt.Fprintln(os.Stderr, "bench-go:", err)
		os.Exit(1)
	}
}

func serveArgs(a []string) error {
	if len(a) < 4 {
		return fmt.Errorf("serve <variant> <redis addr> <limit> <window s> [log]")
	}
	limit, err1 := strconv.Atoi(a[2])
	window, err2 := strconv.Atoi(a[3])
	if err1 != nil || err2 != nil {
		return fmt.Errorf("limit and window are integers: %q %q", a[2], a[3])
	}
	return serve(a[0], a[1], limit, window, len(a) > 4 && a[4] == "log")
}

func run(o options, quick bool, out string) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	if out == "" {
		out = filepath.Join(root, "bench", "results", "go.json")
		if quick {
			out = filepath.Join(root, "target", "bench-go-quick.json")
		}
	}
	module := filepath.Join(root, "target", "release", "libredis_slidingwindow.so")
	if _, err := os.Stat(module); err != nil {
		return fmt.Errorf("%s missing: make build", module)
	}
	withModule, err := startRedis(module)
	if err != nil {
		return err
	}
	defer withModule.stop()
	libraryOnly, err := startRedis("")
	if err != nil {
		return err
	}
	defer libraryOnly.stop()

	rep := report{Rounds: o.rounds, Conns: o.conns, DurationS: o.duration.Seconds(), Rate: o.rate,
		Cores: runtime.NumCPU(), Quick: quick}
	type setup struct {
		variant string
		srv     *server
	}
	setups := []setup{{"none", withModule}, {"slidingwindow", withModule}, {"slidingwindow", libraryOnly},
		{"slidingwindow-nocache", withModule}, {"httprate-redis", withModule}, {"redis_rate", withModule}}
	if o.overshootOnly != "" {
		res, err := overshootRun(o.overshootOnly, withModule, o, root)
		fmt.Fprintf(os.Stderr, "%+v\n", res)
		return err
	}
	for _, tr := range []struct {
		name  string
		who   traffic
		limit int
	}{{"allowed", allowedTraffic, 1_000_000_000}, {"hot", hotTraffic, 100}} {
		rows := make([]row, len(setups))
		for i, s := range setups {
			rows[i] = row{Traffic: tr.name, Variant: s.variant, Server: serverName(s.srv, libraryOnly)}
		}
		for round := 0; round < o.rounds; round++ {
			order := make([]int, len(setups))
			for i := range order {
				order[i] = i
			}
			if round%2 == 1 {
				sort.Sort(sort.Reverse(sort.IntSlice(order)))
			}
			for _, i := range order {
				s := setups[i]
				if err := s.srv.rdb.FlushAll(context.Background()).Err(); err != nil {
					return err
				}
				if err := measure(&rows[i], s.variant, s.srv, tr.who, tr.limit, o); err != nil {
					return fmt.Errorf("%s %s: %w", tr.name, s.variant, err)
				}
				r := rows[i]
				n := len(r.ReqPerS) - 1
				fmt.Fprintf(os.Stderr, "%s round %d %-24s %-7s %8.0f req/s  p99 %6.2f ms  redis %6.2f us/req  cpu %6.1f us/req  refused %.2f\n",
					tr.name, round, s.variant, r.Server, r.ReqPerS[n], r.P99ms[n], r.RedisUs[n], r.CPUUs[n], r.Refused[n])
			}
		}
		rep.Rows = append(rep.Rows, rows...)
	}
	for _, v := range []string{"slidingwindow", "httprate-redis", "redis_rate"} {
		res, err := overshootRun(v, withModule, o, root)
		if err != nil {
			return fmt.Errorf("overshoot %s: %w", v, err)
		}
		fmt.Fprintf(os.Stderr, "overshoot %-16s most in a window %d (limit %d), wrongly refused %d, Retry-After median err %.2f s, worst late %.2f s, worst early %.2f s\n",
			v, res.MostInWindow, res.Limit, res.WronglyRefused, res.RetryMedianErr, res.RetryWorstLate, res.RetryWorstEarl)
		rep.Overshoots = append(rep.Overshoots, res)
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil && len(b) > 0 {
		rep.LoadAvg = string(b[:bytes.IndexByte(b, ' ')])
	}
	data, err := encode(rep)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "wrote", out)
	return os.WriteFile(out, append(data, '\n'), 0o644)
}

func serverName(s, libraryOnly *server) string {
	if s == libraryOnly {
		return "library"
	}
	return "module"
}

// measure: one app, a warm-up, a saturated run (req/s, latency, Redis time) and a paced
// one (the app's CPU per request).
func measure(r *row, variant string, s *server, who traffic, limit int, o options) error {
	a, err := startApp(variant, s.addr, limit, 60, false)
	if err != nil {
		return err
	}
	defer a.stop()
	ports := []int{a.port}
	if _, err := load(ports, o.conns, o.duration/4, 0, who); err != nil {
		return err
	}
	if err := s.resetStats(); err != nil {
		return err
	}
	full, err := load(ports, o.conns, o.duration, 0, who)
	if err != nil {
		return err
	}
	usec, err := s.serverUsec()
	if err != nil {
		return err
	}
	c0 := a.cpu()
	paced, err := load(ports, o.conns, o.duration, o.rate, who)
	if err != nil {
		return err
	}
	c1 := a.cpu()
	n := float64(max(full.requests, 1))
	r.ReqPerS = append(r.ReqPerS, float64(full.requests)/full.seconds)
	r.P50ms = append(r.P50ms, full.p50ms)
	r.P99ms = append(r.P99ms, full.p99ms)
	r.RedisUs = append(r.RedisUs, usec/n)
	r.CPUUs = append(r.CPUUs, float64(c1-c0)/float64(time.Microsecond)/float64(max(paced.requests, 1)))
	r.Refused = append(r.Refused, float64(full.non2xx)/n)
	r.Requests += full.requests + paced.requests
	return nil
}

// overshootRun: 8 apps of one variant on one Redis, 64 connections, one identity.
// Every decision is kept in target/bench-go/overshoot-<variant>.json for a closer look.
func overshootRun(variant string, s *server, o options, root string) (overshoot, error) {
	const limit = 100
	res := overshoot{Variant: variant, Limit: limit, Window: o.overshootWindow, Seconds: o.overshootFor.Seconds()}
	if err := s.rdb.FlushAll(context.Background()).Err(); err != nil {
		return res, err
	}
	var apps []*app
	defer func() {
		for _, a := range apps {
			a.stop()
		}
	}()
	var ports []int
	for i := 0; i < 8; i++ {
		a, err := startApp(variant, s.addr, limit, o.overshootWindow, true)
		if err != nil {
			return res, err
		}
		apps = append(apps, a)
		ports = append(ports, a.port)
	}
	if _, err := load(ports, 64, o.overshootFor, 0, oneIdentity); err != nil {
		return res, err
	}
	var all []decision
	for _, a := range apps {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/__decisions", a.port))
		if err != nil {
			return res, err
		}
		var ds []decision
		err = json.NewDecoder(resp.Body).Decode(&ds)
		resp.Body.Close()
		if err != nil {
			return res, err
		}
		all = append(all, ds...)
	}
	raw := filepath.Join(root, "target", "bench-go", "overshoot-"+variant+".json")
	if data, err := json.Marshal(all); err == nil && os.MkdirAll(filepath.Dir(raw), 0o755) == nil {
		_ = os.WriteFile(raw, data, 0o644)
	}
	res.verdict = judge(all, limit, int64(o.overshootWindow)*int64(time.Second))
	return res, nil
}

// encode writes the report with one line per row, so that a diff shows what moved.
func encode(rep report) ([]byte, error) {
	head := rep
	head.Rows, head.Overshoots = nil, nil
	h, err := json.MarshalIndent(head, "", " ")
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.Write(h[:len(h)-2]) // without the closing "\n}"
	for _, part := range []struct {
		name  string
		items []any
	}{{"rows", anys(rep.Rows)}, {"overshoot", anys(rep.Overshoots)}} {
		fmt.Fprintf(&b, ",\n \"%s\": [", part.name)
		for i, it := range part.items {
			line, err := json.Marshal(it)
			if err != nil {
				return nil, err
			}
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString("\n  ")
			b.Write(line)
		}
		b.WriteString("\n ]")
	}
	b.WriteString("\n}")
	return b.Bytes(), nil
}

func anys[T any](xs []T) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}
