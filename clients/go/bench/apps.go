package main

// The app under load: one net/http server per child process (`bench serve ...`), GET /
// answering "ok" behind one of the limiters, keyed by the X-Id header. With -log it keeps
// every decision (time, allowed, Retry-After) and hands them over at GET /__decisions.

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	_ "net/http/pprof" // /debug/pprof/ on the app when BENCH_PPROF=1
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/go-chi/httprate"
	httprateredis "github.com/go-chi/httprate-redis"
	"github.com/go-redis/redis_rate/v10"
	slidingwindow "github.com/redis-slidingwindow/redis-slidingwindow/clients/go"
	"github.com/redis/go-redis/v9"
)

// Variants: the app without a limiter, ours (module or library; at its defaults, with the
// middleware's deny cache, and without it), and
// the two peers on the same go-redis client.
var variants = []string{"none", "slidingwindow", "slidingwindow-nocache", "httprate-redis", "redis_rate"}

type decision struct {
	T          int64   `json:"t"` // unix ns when the app received the request
	Allowed    bool    `json:"a"`
	RetryAfter float64 `json:"r"` // the Retry-After header's seconds; -1 when absent
}

type recorder struct {
	mu  sync.Mutex
	log []decision
}

func (rec *recorder) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t := time.Now().UnixNano()
		sw := &status{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(sw, r)
		d := decision{T: t, Allowed: sw.code < 400, RetryAfter: -1}
		if v, err := strconv.ParseFloat(w.Header().Get("Retry-After"), 64); err == nil {
			d.RetryAfter = v
		}
		rec.mu.Lock()
		rec.log = append(rec.log, d)
		rec.mu.Unlock()
	})
}

type status struct {
	http.ResponseWriter
	code int
}

func (s *status) WriteHeader(code int) { s.code = code; s.ResponseWriter.WriteHeader(code) }

func byID(r *http.Request) string { return r.Header.Get("X-Id") }

// limited puts the variant's limiter (limit per window) in front of h.
func limited(variant string, rdb *redis.Client, limit, window int, h http.Handler) (http.Handler, error) {
	win := time.Duration(window) * time.Second
	switch variant {
	case "none":
		return h, nil
	case "slidingwindow", "slidingwindow-nocache":
		l := slidingwindow.New(slidingwindow.GoRedis(rdb))
		mw := slidingwindow.Middleware(l, slidingwindow.NewCall(uint64(limit), uint64(window)),
			slidingwindow.MiddlewareOptions{Key: byID, NoDenyCache: variant == "slidingwindow-nocache"})
		return mw(h), nil
	case "httprate-redis":
		return httprate.Limit(limit, win,
			httprate.WithKeyFuncs(func(r *http.Request) (string, error) { return byID(r), nil }),
			httprateredis.WithRedisLimitCounter(&httprateredis.Config{Client: rdb, WindowLength: win}),
		)(h), nil
	case "redis_rate":
		// GCRA with the window's limit as its burst: the closest setting to "limit per window".
		rl := redis_rate.NewLimiter(rdb)
		rate := redis_rate.Limit{Rate: limit, Burst: limit, Period: win}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			res, err := rl.Allow(r.Context(), byID(r), rate)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			if res.Allowed == 0 {
				w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(res.RetryAfter.Seconds()))))
				http.Error(w, "Too Many Requests", http.StatusTooManyRequests)
				return
			}
			h.ServeHTTP(w, r)
		}), nil
	}
	return nil, fmt.Errorf("unknown variant %q (one of %v)", variant, variants)
}

// serve runs one app until killed, printing "PORT n" once it listens.
func serve(variant, redisAddr string, limit, window int, keepLog bool) error {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true, PoolSize: 64})
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		return err
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	h, err := limited(variant, rdb, limit, window, ok)
	if err != nil {
		return err
	}
	rec := &recorder{}
	if keepLog {
		h = rec.wrap(h)
	}
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("/__decisions", func(w http.ResponseWriter, _ *http.Request) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		_ = json.NewEncoder(w).Encode(rec.log)
	})
	if os.Getenv("BENCH_PPROF") == "1" {
		mux.Handle("/debug/pprof/", http.DefaultServeMux)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stdout, "PORT %d\n", ln.Addr().(*net.TCPAddr).Port)
	return http.Serve(ln, mux)
}
