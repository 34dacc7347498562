package slidingwindow

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

func get(t *testing.T, url string, h map[string]string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func TestMiddleware(t *testing.T) {
	s := moduleServer(t)
	l := New(GoRedis(client(t, s)), Options{Prefix: uniqueID(t) + ":"})
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("fail") != "" {
			w.WriteHeader(500)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})

	t.Run("by-ip-429-headers", func(t *testing.T) {
		srv := httptest.NewServer(LimitByIP(l, 2, 60)(ok))
		defer srv.Close()
		for i, want := range []int{200, 200, 429, 429} {
			resp := get(t, srv.URL, nil)
			if resp.StatusCode != want {
				t.Fatalf("request %d: %d, want %d", i, resp.StatusCode, want)
			}
			if resp.Header.Get("X-RateLimit-Limit") != "2" || resp.Header.Get("RateLimit-Policy") != `"default";q=2;w=60` {
				t.Fatalf("request %d headers: %v", i, resp.Header)
			}
			ra := resp.Header.Get("Retry-After")
			if (want == 429) != (ra != "") {
				t.Fatalf("request %d: Retry-After %q", i, ra)
			}
		}
	})

	t.Run("by-header-and-several-limits", func(t *testing.T) {
		mw, err := LimitRates(l, "1/second;3/minute", MiddlewareOptions{Key: KeyByHeader("X-User"), Policy: "api"})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(mw(ok))
		defer srv.Close()
		a := get(t, srv.URL, map[string]string{"X-User": "a"})
		b := get(t, srv.URL, map[string]string{"X-User": "b"})
		a2 := get(t, srv.URL, map[string]string{"X-User": "a"})
		none := get(t, srv.URL, nil)
		if a.StatusCode != 200 || b.StatusCode != 200 || a2.StatusCode != 429 || none.StatusCode != 200 {
			t.Fatalf("statuses %d %d %d %d", a.StatusCode, b.StatusCode, a2.StatusCode, none.StatusCode)
		}
		if got := a.Header.Get("RateLimit-Policy"); got != `"api/1s";q=1;w=1, "api/60s";q=3;w=60` {
			t.Fatalf("RateLimit-Policy %q", got)
		}
		if none.Header.Get("X-RateLimit-Limit") != "" {
			t.Fatal("an unlimited request got headers")
		}
	})

	t.Run("count-only-failures", func(t *testing.T) {
		srv := httptest.NewServer(Middleware(l, NewCall(2, 60), MiddlewareOptions{Key: KeyByHeader("X-Id"), CountOnlyFailures: true})(ok))
		defer srv.Close()
		h := map[string]string{"X-Id": "f"}
		for i := 0; i < 5; i++ {
			if r := get(t, srv.URL, h); r.StatusCode != 200 {
				t.Fatalf("success %d refused: %d", i, r.StatusCode)
			}
		}
		for i, want := range []int{500, 500, 429} {
			if r := get(t, srv.URL+"?fail=1", h); r.StatusCode != want {
				t.Fatalf("failure %d: %d, want %d", i, r.StatusCode, want)
			}
		}
	})

	t.Run("shadow", func(t *testing.T) {
		srv := httptest.NewServer(Middleware(l, NewCall(1, 60), MiddlewareOptions{Key: KeyByHeader("X-Id"), Shadow: true})(ok))
		defer srv.Close()
		h := map[string]string{"X-Id": "s"}
		get(t, srv.URL, h)
		r := get(t, srv.URL, h)
		if r.StatusCode != 200 || r.Header.Get("Retry-After") == "" {
			t.Fatalf("shadow: %d %v", r.StatusCode, r.Header)
		}
	})

	t.Run("real-ip", func(t *testing.T) {
		trusted, _ := NewTrustedProxies("127.0.0.0/8")
		srv := httptest.NewServer(LimitByRealIP(l, trusted, 1, 60)(ok))
		defer srv.Close()
		a := get(t, srv.URL, map[string]string{"X-Forwarded-For": "198.51.100.1"})
		b := get(t, srv.URL, map[string]string{"X-Forwarded-For": "198.51.100.2"})
		a2 := get(t, srv.URL, map[string]string{"X-Forwarded-For": "198.51.100.1"})
		if a.StatusCode != 200 || b.StatusCode != 200 || a2.StatusCode != 429 {
			t.Fatalf("statuses %d %d %d", a.StatusCode, b.StatusCode, a2.StatusCode)
		}
	})
}

// The middleware answers refusals it has seen without Redis by default (as the Python
// and Node middlewares do); NoDenyCache and Shadow send every request.
func TestMiddlewareDenyCacheByDefault(t *testing.T) {
	s := moduleServer(t)
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	admin := client(t, s)
	for _, tc := range []struct {
		name   string
		o      MiddlewareOptions
		checks int64 // CHECKs Redis sees for 20 requests, 2 allowed
	}{{"default", MiddlewareOptions{}, 3}, {"no-deny-cache", MiddlewareOptions{NoDenyCache: true}, 20},
		{"shadow", MiddlewareOptions{Shadow: true}, 20}} {
		t.Run(tc.name, func(t *testing.T) {
			l := New(GoRedis(client(t, s)), Options{Prefix: uniqueID(t) + ":"})
			tc.o.Key = KeyByHeader("X-Id")
			srv := httptest.NewServer(Middleware(l, NewCall(2, 60), tc.o)(ok))
			defer srv.Close()
			before := checkCalls(t, admin)
			refused := 0
			for i := 0; i < 20; i++ {
				if get(t, srv.URL, map[string]string{"X-Id": "one"}).StatusCode == 429 {
					refused++
				}
			}
			if want := map[bool]int{true: 0, false: 18}[tc.o.Shadow]; refused != want {
				t.Fatalf("refused %d of 20, want %d", refused, want)
			}
			if got := checkCalls(t, admin) - before; got != tc.checks {
				t.Fatalf("Redis saw %d CHECKs for 20 requests, want %d", got, tc.checks)
			}
		})
	}
}

func checkCalls(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_slidingwindow.check:calls="); ok {
			n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			return n
		}
	}
	return 0
}
