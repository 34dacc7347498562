// Command harness (make bench-go, bench-python, bench-java, bench-node-e2e) measures a rate
// limiter in an HTTP app against its peers, in the same app on the same Redis:
//
//   - requests/s and p50/p99 at 32 connections, the Redis server time per request (INFO
//     commandstats), and the app's CPU per request at a fixed, unsaturated rate (from
//     /proc), the median of alternating rounds; once with every request allowed and once
//     with 90% of the requests from one refused identity;
//   - overshoot: 64 connections over several app processes (one limiter each, one Redis),
//     one identity, 100 per 10 s, for 30 s; every answer, as the callers saw it, judged
//     against an exact sliding log.
//
// Ours runs on a server with the module and once on one without it (the library, loaded
// by the client). The apps are other programs keeping launcher's contract (procs.go):
// clients/go/bench (the Go client's middleware against httprate-redis and redis_rate),
// clients/python/bench/app.py, clients/java/bench, clients/node/bench/app.ts. Writes
// bench/results/<app-name>.json; bench/readme_blocks.py renders it.
//
//	go run . -app-name go -app-cmd /path/to/go-app -variants none,slidingwindow,... [-quick] [-out path]
//	go run . -app-name java -app-cmd "java -jar ..." -variants none,slidingwindow,redis \
//	         -overshoot-variants slidingwindow,redis -instances 4
//	go run . load <port> <seconds> [rate] [hot]   (32 connections on a running app, at a fixed
//	                          rate (req/s) if given, the hot traffic if asked, e.g. to profile it)
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

type options struct {
	rounds, conns     int
	duration, warmup  time.Duration
	rate              float64
	overshootFor      time.Duration
	overshootWindow   int
	instances         int
	allowedLimit      int
	variants          []string
	overshootVariants []string
	apps              launcher
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
	Variant   string  `json:"variant"`
	Limit     int     `json:"limit"`
	Window    int     `json:"window_s"`
	Seconds   float64 `json:"seconds"`
	Instances int     `json:"instances"`
	verdict
}

type report struct {
	App        string      `json:"app"`
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
	if len(os.Args) > 3 && os.Args[1] == "load" { // load <port> <seconds> [rate] [hot]
		loadArgs(os.Args[2:])
		return
	}
	quick := flag.Bool("quick", false, "a small run (seconds) that keeps the harness from rotting")
	name := flag.String("app-name", "", "names the results: bench/results/<name>.json")
	cmd := flag.String("app-cmd", "", "the app's command: `<cmd> <variant> <redis addr> <limit> <window s>` prints \"PORT n\"")
	variants := flag.String("variants", "", "the app's variants to measure (ours: the ones ending in \"slidingwindow\")")
	shoot := flag.String("overshoot-variants", "", "the variants of the overshoot run")
	instances := flag.Int("instances", 8, "app processes in the overshoot run")
	rounds := flag.Int("rounds", 5, "alternating rounds")
	warmup := flag.Duration("warmup", 0, "load before each measured run (default: a quarter of a run)")
	allowedLimit := flag.Int("allowed-limit", 1_000_000_000, "the per-identity limit (per 60 s) of the all-allowed traffic")
	rate := flag.Float64("rate", 0, "the fixed rate (req/s) of the CPU runs (default 2000; -quick 500); below what the slowest app serves")
	only := flag.String("overshoot", "", "run only the overshoot, of this variant")
	out := flag.String("out", "", "the JSON to write (default bench/results/<app-name>.json; -quick: target/bench-<app-name>-quick.json)")
	flag.Parse()
	if *name == "" || *cmd == "" {
		fmt.Fprintln(os.Stderr, "bench: -app-name and -app-cmd are needed (see the Makefile's bench-go, bench-python, bench-java, bench-node-e2e)")
		os.Exit(2)
	}
	o := options{rounds: *rounds, conns: 32, duration: 3 * time.Second, rate: 2000,
		overshootFor: 30 * time.Second, overshootWindow: 10}
	if *quick {
		o = options{rounds: 1, conns: 8, duration: 500 * time.Millisecond, rate: 500,
			overshootFor: 4 * time.Second, overshootWindow: 1}
	}
	o.warmup = o.duration / 4
	if *rate > 0 {
		o.rate = *rate
	}
	o.allowedLimit = *allowedLimit
	if *warmup > 0 {
		o.warmup = *warmup
	}
	o.instances, o.variants, o.overshootVariants = *instances, split(*variants), split(*shoot)
	o.apps = launcher{cmd: strings.Fields(*cmd)}
	if *only != "" {
		o.variants, o.overshootVariants = nil, []string{*only}
	}
	if err := run(o, *name, *quick, *out); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func split(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

func loadArgs(a []string) {
	port, err1 := strconv.Atoi(a[0])
	secs, err2 := strconv.Atoi(a[1])
	rate := 0.0
	var err3 error
	if len(a) > 2 {
		rate, err3 = strconv.ParseFloat(a[2], 64)
	}
	if err1 != nil || err2 != nil || err3 != nil {
		fmt.Fprintln(os.Stderr, "load <port> <seconds> [rate] [hot]")
		os.Exit(2)
	}
	who := allowedTraffic
	if len(a) > 3 && a[3] == "hot" {
		who = hotTraffic
	}
	r, err := load([]int{port}, 32, time.Duration(secs)*time.Second, rate, who, false)
	fmt.Fprintf(os.Stderr, "%d requests, %.0f req/s, p99 %.2f ms, err %v\n", r.requests, float64(r.requests)/r.seconds, r.p99ms, err)
}

type setup struct {
	variant string
	srv     *server
	server  string
}

func run(o options, name string, quick bool, out string) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	if out == "" {
		out = filepath.Join(root, "bench", "results", name+".json")
		if quick {
			out = filepath.Join(root, "target", "bench-"+name+"-quick.json")
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

	rep := report{App: name, Rounds: o.rounds, Conns: o.conns, DurationS: o.duration.Seconds(), Rate: o.rate,
		Cores: runtime.NumCPU(), Quick: quick}
	var setups []setup
	for _, v := range o.variants {
		setups = append(setups, setup{v, withModule, "module"})
		if strings.HasSuffix(v, "slidingwindow") { // ours once more where a module cannot be loaded
			setups = append(setups, setup{v, libraryOnly, "library"})
		}
	}
	for _, tr := range []struct {
		name  string
		who   traffic
		limit int
	}{{"allowed", allowedTraffic, o.allowedLimit}, {"hot", hotTraffic, 100}} {
		if len(setups) == 0 {
			break
		}
		rows, err := traffics(setups, tr.name, tr.who, tr.limit, o)
		if err != nil {
			return err
		}
		rep.Rows = append(rep.Rows, rows...)
	}
	for _, v := range o.overshootVariants {
		res, err := overshootRun(v, withModule, o, root, name)
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

// traffics measures every setup in one traffic, in alternating order round by round.
func traffics(setups []setup, name string, who traffic, limit int, o options) ([]row, error) {
	rows := make([]row, len(setups))
	for i, s := range setups {
		rows[i] = row{Traffic: name, Variant: s.variant, Server: s.server}
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
				return nil, err
			}
			if err := measure(&rows[i], s, who, limit, o); err != nil {
				return nil, fmt.Errorf("%s %s: %w", name, s.variant, err)
			}
			r := rows[i]
			n := len(r.ReqPerS) - 1
			fmt.Fprintf(os.Stderr, "%s round %d %-24s %-7s %8.0f req/s  p99 %6.2f ms  redis %6.2f us/req  cpu %6.1f us/req  refused %.2f\n",
				name, round, s.variant, r.Server, r.ReqPerS[n], r.P99ms[n], r.RedisUs[n], r.CPUUs[n], r.Refused[n])
		}
	}
	return rows, nil
}

// measure: one app, a warm-up, a saturated run (req/s, latency, Redis time) and a paced
// one (the app's CPU per request).
func measure(r *row, s setup, who traffic, limit int, o options) error {
	a, err := o.apps.start(s.variant, s.srv.addr, limit, 60)
	if err != nil {
		return err
	}
	defer a.stop()
	ports := []int{a.port}
	if _, err := load(ports, o.conns, o.warmup, 0, who, false); err != nil {
		return err
	}
	if err := s.srv.resetStats(); err != nil {
		return err
	}
	full, err := load(ports, o.conns, o.duration, 0, who, false)
	if err != nil {
		return err
	}
	usec, err := s.srv.serverUsec()
	if err != nil {
		return err
	}
	c0 := a.cpu()
	paced, err := load(ports, o.conns, o.duration, o.rate, who, false)
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

// overshootRun: o.instances apps of one variant on one Redis, 64 connections, one
// identity. Every answer is kept in target/bench-<name>/overshoot-<variant>.json.
func overshootRun(variant string, s *server, o options, root, name string) (overshoot, error) {
	const limit = 100
	res := overshoot{Variant: variant, Limit: limit, Window: o.overshootWindow,
		Seconds: o.overshootFor.Seconds(), Instances: o.instances}
	if err := s.rdb.FlushAll(context.Background()).Err(); err != nil {
		return res, err
	}
	var ports []int
	for i := 0; i < o.instances; i++ {
		a, err := o.apps.start(variant, s.addr, limit, o.overshootWindow)
		if err != nil {
			return res, err
		}
		defer a.stop()
		ports = append(ports, a.port)
	}
	got, err := load(ports, 64, o.overshootFor, 0, oneIdentity, true)
	if err != nil {
		return res, err
	}
	raw := filepath.Join(root, "target", "bench-"+name, "overshoot-"+variant+".json")
	if data, err := json.Marshal(got.decisions); err == nil && os.MkdirAll(filepath.Dir(raw), 0o755) == nil {
		_ = os.WriteFile(raw, data, 0o644)
	}
	res.verdict = judge(got.decisions, limit, int64(o.overshootWindow)*int64(time.Second))
	return res, nil
}

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
