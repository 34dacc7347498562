package slidingwindow_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	slidingwindow "github.com/redis-slidingwindow/redis-slidingwindow/clients/go"
)

// The README's quick start (compiled by go vet and go test; not run: it needs Redis on 6379).
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	limiter := slidingwindow.New(slidingwindow.GoRedis(rdb))

	d, err := limiter.Check(context.Background(), "user:42", slidingwindow.NewCall(100, 60))
	if err == nil {
		fmt.Println(d.Allowed(), d.Summary.Remaining, d.RetryAfter())
	}

	hello := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "hello") })
	_ = http.ListenAndServe("127.0.0.1:3000", slidingwindow.LimitByIP(limiter, 100, 60)(hello))
}

// The rueidis adapter (compiled, not run).
func ExampleRueidis() {
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
	if err != nil {
		return
	}
	defer rc.Close()
	limiter := slidingwindow.New(slidingwindow.Rueidis(rc), slidingwindow.Options{
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)), // circuit open/closed as records
	})
	if d, err := limiter.Check(context.Background(), "user:42", slidingwindow.NewCall(100, 60)); err == nil {
		fmt.Println(d.Allowed())
	}
}
