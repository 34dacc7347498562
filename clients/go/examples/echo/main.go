// An echo app limited per client IP by the slidingwindow middleware, wrapped with
// echo.WrapMiddleware: /hello allows 5 requests per sliding minute (then 429 with
// Retry-After), /healthz is not limited.
//
//	REDIS_ADDR=127.0.0.1:6379 ADDR=127.0.0.1:3000 go run ./echo
package main

import (
	"context"
	"errors"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/redis/go-redis/v9"

	slidingwindow "github.com/redis-slidingwindow/redis-slidingwindow/clients/go"
)

func app(l *slidingwindow.Limiter) *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Use(middleware.Recover())
	e.GET("/healthz", func(c echo.Context) error { return c.String(http.StatusOK, "ok\n") })
	limited := e.Group("", echo.WrapMiddleware(slidingwindow.LimitByIP(l, 5, 60)))
	limited.GET("/hello", func(c echo.Context) error { return c.String(http.StatusOK, "hello\n") })
	return e
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
	log.Printf("echo example on http://%s/hello", ln.Addr())
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
