package slidingwindow

import (
	"context"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestLiveFrozen(t *testing.T) {
	s := moduleServer(t)
	l := New(GoRedis(client(t, s)), Options{Timeout: 300 * time.Millisecond})
	if _, err := l.Check(context.Background(), "x", NewCall(3, 60)); err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer s.cmd.Process.Signal(syscall.SIGCONT)
	start := time.Now()
	d, err := l.Check(context.Background(), "x", NewCall(3, 60))
	first := time.Since(start)
	if first < 250*time.Millisecond || first > 700*time.Millisecond {
		t.Fatalf("frozen server: first call took %v, want about the 300ms timeout", first)
	}
	if err == nil && !d.Degraded() {
		t.Fatalf("frozen server answered: %+v", d)
	}
	start = time.Now()
	d, err = l.Check(context.Background(), "x", NewCall(3, 60))
	if err != nil || !d.Degraded() || !d.Allowed() || time.Since(start) > 100*time.Millisecond {
		t.Fatalf("frozen server, second call: %+v %v in %v", d, err, time.Since(start))
	}
	t.Logf("frozen: first answer in %v, the next in %v", first, time.Since(start))
}

// TestLiveCluster: 3 masters of Redis 7.0 without the module; the library loaded on
// each by the client; ids spread over the slots.
func TestLiveCluster(t *testing.T) {
	var addrs []string
	for i := 0; i < 3; i++ {
		p := freePort(t)
		s := &server{t: t, bin: "redis-server", port: p, args: []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes-" + strconv.Itoa(p) + ".conf", "--cluster-node-timeout", "2000"}}
		s.start()
		t.Cleanup(s.stop)
		addrs = append(addrs, s.addr())
	}
	ctx := context.Background()
	// slots split in three, nodes introduced to each other
	ranges := [][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}
	for i, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		args := []any{"CLUSTER", "ADDSLOTSRANGE", ranges[i][0], ranges[i][1]}
		if err := c.Do(ctx, args...).Err(); err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			host, port := "127.0.0.1", addrs[0][len("127.0.0.1:"):]
			if err := c.Do(ctx, "CLUSTER", "MEET", host, port).Err(); err != nil {
				t.Fatal(err)
			}
		}
		c.Close()
	}
	for deadline := time.Now().Add(15 * time.Second); ; {
		ok := true
		for _, a := range addrs {
			c := redis.NewClient(&redis.Options{Addr: a})
			info, err := c.ClusterInfo(ctx).Result()
			c.Close()
			if err != nil || !contains(splitLines(info), "cluster_state:ok") {
				ok = false
			}
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the cluster did not come up")
		}
		time.Sleep(100 * time.Millisecond)
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	t.Cleanup(func() { cc.Close() })
	l := New(GoRedis(cc))
	callSet(t, l)
	exactlyTheLimit(t, l)
	for i := 0; i < 30; i++ {
		d, err := l.Check(ctx, "spread"+strconv.Itoa(i), NewCall(1, 60))
		if err != nil || !d.Allowed() || d.Degraded() {
			t.Fatalf("id %d: %+v %v", i, d, err)
		}
	}
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		n, err := c.DBSize(ctx).Result()
		c.Close()
		if err != nil || n == 0 {
			t.Fatalf("%s holds %d keys (%v): the ids did not spread", a, n, err)
		}
	}
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			line := s[start:i]
			if len(line) > 0 && line[len(line)-1] == '\r' {
				line = line[:len(line)-1]
			}
			out = append(out, line)
			start = i + 1
		}
	}
	return out
}
