// A gin app limited per client IP by a gin handler on the limiter itself (Check, the
// header helpers, 429): /hello allows 5 requests per sliding minute (then 429 with
// Retry-After), /healthz is not limited.
//
//	REDIS_ADDR=127.0.0.1:6379 ADDR=127.0.0.1:3000 go run ./gin
package main

import (
	"context"
	"errors"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	slidingwindow "github.com/redis-slidingwindow/redis-slidingwindow/clients/go"
)

// limit counts each request by the peer's address (slidingwindow.KeyByIP: gin's
// ClientIP trusts X-Forwarded-For from anyone unless SetTrustedProxies is set) and
// refuses it with 429 past limit per window seconds. Outages are answered by the
// limiter's circuit (fail-open by default); any other error lets the request through.
func limit(l *slidingwindow.Limiter, limit, window uint64) gin.HandlerFunc {
	key := slidingwindow.KeyByIP()
	call := slidingwindow.NewCall(limit, window)
	return func(c *gin.Context) {
		d, err := l.Check(c.Request.Context(), key(c.Request), call)
		if err != nil {
			_ = c.Error(err)
			c.Next()
			return
		}
		for _, h := range slidingwindow.LimitsHeaders(d, "default") {
			c.Header(h.Name, h.Value)
		}
		if !d.Allowed() {
			c.AbortWithStatusJSON(http.StatusTooManyRequests, gin.H{"error": "too many requests"})
			return
		}
		c.Next()
	}
}

func app(l *slidingwindow.Limiter) *gin.Engine {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(gin.Recovery())
	r.GET("/healthz", func(c *gin.Context) { c.String(http.StatusOK, "ok\n") })
	r.GET("/hello", limit(l, 5, 60), func(c *gin.Context) { c.String(http.StatusOK, "hello\n") })
	return r
}

// run serves on ln until ctx ends.
func run(ctx context.Context, ln net.Listener, redisAddr string) error {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	srv := &http.Server{Handler: app(slidingwindow.New(slidingwindow.GoRedis(rdb)))}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func main() {
	ln, err := net.Listen("tcp", env("ADDR", "127.0.0.1:3000"))
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	log.Printf("gin example on http://%s/hello", ln.Addr())
	if err := run(ctx, ln, env("REDIS_ADDR", "127.0.0.1:6379")); err != nil {
		log.Fatal(err)
	}
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
