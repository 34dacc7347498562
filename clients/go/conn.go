package slidingwindow

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// Conn is what the limiter needs from a Redis client. Implement it for a client this
// module has no adapter for.
//
// Replies are int64, string, []any or nil; a server's error reply is returned as a
// *ServerError (its text unchanged), anything else returned as an error is taken for a
// connection problem.
type Conn interface {
	// Do sends one command. key is the command's key ("" for none), for routing in a
	// cluster; args is the whole command, its name first.
	Do(ctx context.Context, key string, args ...string) (any, error)
	// DoAll sends a keyless command to every primary (a single server: to it), one
	// Reply per primary.
	DoAll(ctx context.Context, args ...string) ([]Reply, error)
	// IsCluster reports whether keys live on several servers (no one server clock).
	IsCluster() bool
}

// Reply is one primary's answer in DoAll.
type Reply struct {
	Value any
	Err   error
}

// GoRedis adapts a go-redis v9 client: *redis.Client, *redis.ClusterClient (DoAll on
// every master), failover clients, and *redis.Ring (DoAll on every shard; each key maps
// to one shard).
//
// Set ContextTimeoutEnabled in the client's options so a frozen server costs the call
// no more than the limiter's timeout at the socket too (the limiter returns at its
// deadline either way).
func GoRedis(c redis.UniversalClient) Conn { return goRedisConn{c, contextTimeouts(c)} }

type goRedisConn struct {
	c        redis.UniversalClient
	deadline bool // the client's options have ContextTimeoutEnabled
}

// deadlineBound is a Conn whose calls return by their context's deadline on their own:
// the limiter then makes them on the caller's goroutine instead of a goroutine per call.
type deadlineBound interface{ returnsByDeadline() bool }

func (g goRedisConn) returnsByDeadline() bool { return g.deadline }

func contextTimeouts(c redis.UniversalClient) bool {
	switch x := c.(type) {
	case *redis.Client:
		return x.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return x.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return x.Options().ContextTimeoutEnabled
	}
	return false
}

func toAnys(args []string) []any {
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = a
	}
	return out
}

func fromGoRedis(v any, err error) (any, error) {
	if err == nil {
		return normalize(v), nil
	}
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	var re redis.Error
	if errors.As(err, &re) {
		return nil, &ServerError{Msg: err.Error()}
	}
	return nil, err
}

// normalize turns RESP3 shapes into the ones the parsers read.
func normalize(v any) any {
	switch x := v.(type) {
	case []any:
		for i := range x {
			x[i] = normalize(x[i])
		}
		return x
	case []byte:
		return string(x)
	case int:
		return int64(x)
	}
	return v
}

func (g goRedisConn) Do(ctx context.Context, _ string, args ...string) (any, error) {
	return fromGoRedis(g.c.Do(ctx, toAnys(args)...).Result())
}

func (g goRedisConn) DoAll(ctx context.Context, args ...string) ([]Reply, error) {
	var each func(context.Context, func(context.Context, *redis.Client) error) error
	switch c := g.c.(type) {
	case *redis.ClusterClient:
		each = c.ForEachMaster
	case *redis.Ring:
		each = c.ForEachShard
	default:
		v, err := fromGoRedis(g.c.Do(ctx, toAnys(args)...).Result())
		return []Reply{{v, err}}, nil
	}
	var out []Reply
	var mu chanMutex = make(chan struct{}, 1)
	err := each(ctx, func(ctx context.Context, c *redis.Client) error {
		v, err := fromGoRedis(c.Do(ctx, toAnys(args)...).Result())
		mu <- struct{}{}
		out = append(out, Reply{v, err})
		<-mu
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

type chanMutex chan struct{}

func (g goRedisConn) IsCluster() bool {
	switch g.c.(type) {
	case *redis.ClusterClient, *redis.Ring:
		return true
	}
	return false
}
