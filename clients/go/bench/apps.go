package main

// The Go app under load: one net/http server per process, started by bench/harness as
// `bench <variant> <redis addr> <limit> <window s>`, GET / answering "ok" behind one of
// the limiters, keyed by the X-Id header.

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	_ "net/http/pprof" // /debug/pprof/ on the app when BENCH_PPROF=1
	"os"
	"strconv"
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
func serve(variant, redisAddr string, limit, window int) error {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true, PoolSize: 64})
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		return err
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	h, err := limited(variant, rdb, limit, window, ok)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/", h)
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
