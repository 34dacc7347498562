// Package exampletest is the one test body of the examples: it starts a real module
// server, runs an example's run function on a free port, and drives it over HTTP.
package exampletest

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/redis-slidingwindow/redis-slidingwindow/clients/go/internal/testserver"
)

// Run is an example's server: it serves on ln, on Redis at redisAddr, until ctx ends.
type Run func(ctx context.Context, ln net.Listener, redisAddr string) error

// Drive: /hello answers 200 five times with X-RateLimit-Remaining 4..0, then 429 with a
// Retry-After of 1..60 s and Remaining 0; /healthz stays 200; the server stops when asked.
func Drive(t *testing.T, run Run) {
	s := testserver.Module(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, ln, s.Addr()) }()
	base := "http://" + ln.Addr().String()
	client := &http.Client{Timeout: 5 * time.Second}
	get := func(path string) *http.Response {
		t.Helper()
		resp, err := client.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for i := 0; i < 5; i++ {
		resp := get("/hello")
		if resp.StatusCode != http.StatusOK || resp.Header.Get("X-RateLimit-Remaining") != strconv.Itoa(4-i) || resp.Header.Get("X-RateLimit-Limit") != "5" {
			t.Fatalf("request %d: %d %v", i+1, resp.StatusCode, resp.Header)
		}
	}
	for i := 0; i < 2; i++ {
		resp := get("/hello")
		retry, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		if resp.StatusCode != http.StatusTooManyRequests || err != nil || retry < 1 || retry > 60 || resp.Header.Get("X-RateLimit-Remaining") != "0" {
			t.Fatalf("request %d past the limit: %d %v", 6+i, resp.StatusCode, resp.Header)
		}
	}
	for i := 0; i < 7; i++ {
		if resp := get("/healthz"); resp.StatusCode != http.StatusOK || resp.Header.Get("Retry-After") != "" {
			t.Fatalf("/healthz: %d %v", resp.StatusCode, resp.Header)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the example did not stop")
	}
}
