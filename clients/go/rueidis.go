package slidingwindow

import (
	"context"
	"sync"

	"github.com/redis/rueidis"
)

// Rueidis adapts a rueidis client: standalone, sentinel, or cluster (DoAll on every
// node: the primaries take FUNCTION LOAD, replicas answer READONLY and copy it).
//
// Commands go as rueidis Arbitrary commands with the key marked, so a cluster routes them
// by its slot; rueidis retries them only as it retries any write (not at all by default
// for a command that is not read-only).
func Rueidis(c rueidis.Client) Conn { return rueidisConn{c} }

type rueidisConn struct{ c rueidis.Client }

// rueidis gives up a call when its context ends, whatever the server does.
func (rueidisConn) returnsByDeadline() bool { return true }

func build(c rueidis.Client, key string, args []string) rueidis.Completed {
	if key != "" {
		for i := 1; i < len(args); i++ {
			if args[i] == key {
				return c.B().Arbitrary(args[:i]...).Keys(key).Args(args[i+1:]...).Build()
			}
		}
	}
	return c.B().Arbitrary(args...).Build()
}

func fromRueidis(v any, err error) (any, error) {
	if err == nil {
		return normalizeRueidis(v), nil
	}
	if rueidis.IsRedisNil(err) {
		return nil, nil
	}
	if re, ok := rueidis.IsRedisErr(err); ok {
		return nil, &ServerError{Msg: re.Error()}
	}
	return nil, err
}

// normalizeRueidis: ToAny gives int64, string, []any and nil already; an error inside an
// array is an error reply there.
func normalizeRueidis(v any) any {
	switch x := v.(type) {
	case []any:
		for i := range x {
			x[i] = normalizeRueidis(x[i])
		}
		return x
	case *rueidis.RedisError:
		return &ServerError{Msg: x.Error()}
	}
	return v
}

func (r rueidisConn) Do(ctx context.Context, key string, args ...string) (any, error) {
	if len(args) == 0 {
		return nil, invalid("no command")
	}
	return fromRueidis(r.c.Do(ctx, build(r.c, key, args)).ToAny())
}

func (r rueidisConn) DoAll(ctx context.Context, args ...string) ([]Reply, error) {
	if r.c.Mode() != rueidis.ClientModeCluster {
		v, err := r.Do(ctx, "", args...)
		return []Reply{{v, err}}, nil
	}
	nodes := r.c.Nodes()
	out := make([]Reply, 0, len(nodes))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := fromRueidis(n.Do(ctx, build(n, "", args)).ToAny())
			mu.Lock()
			out = append(out, Reply{v, err})
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out, nil
}

func (r rueidisConn) IsCluster() bool { return r.c.Mode() == rueidis.ClientModeCluster }
