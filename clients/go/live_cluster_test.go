package slidingwindow

import (
	"context"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redis-slidingwindow/redis-slidingwindow/clients/go/internal/testserver"
)

func TestLiveFrozen(t *testing.T) {
	eachAdapter(t, func(t *testing.T, a adapter) { frozen(t, a) })
	// A go-redis client left at its defaults waits out its 3 s read timeout at the socket;
	// the limiter, not trusting it (no ContextTimeoutEnabled), still answers at its own.
	t.Run("go-redis-without-context-timeouts", func(t *testing.T) {
		frozen(t, adapter{name: "plain", single: func(t *testing.T, s *server) Conn {
			c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
			t.Cleanup(func() { c.Close() })
			if GoRedis(c).(deadlineBound).returnsByDeadline() {
				t.Fatal("a client without ContextTimeoutEnabled taken to return by the deadline")
			}
			return GoRedis(c)
		}})
	})
}

func frozen(t *testing.T, a adapter) {
	s := moduleServer(t)
	l := New(a.single(t, s), Options{Timeout: 300 * time.Millisecond})
	if _, err := l.Check(context.Background(), "x", NewCall(3, 60)); err != nil {
		t.Fatal(err)
	}
	if err := s.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer s.Cmd.Process.Signal(syscall.SIGCONT)
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

// startCluster: 3 masters of Redis 7.0 without the module, slots split in three; it
// returns the servers once every node reports cluster_state:ok and all 16384 slots ok
// (without full coverage required, the state is ok before every node knows every slot).
func startCluster(t *testing.T) []*server {
	var nodes []*server
	var addrs []string
	for i := 0; i < 3; i++ {
		p := testserver.FreePort(t)
		s := &server{T: t, Bin: "redis-server", Port: p, Args: []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes-" + strconv.Itoa(p) + ".conf", "--cluster-node-timeout", "2000", "--cluster-require-full-coverage", "no"}}
		s.Start()
		t.Cleanup(s.Stop)
		nodes = append(nodes, s)
		addrs = append(addrs, s.Addr())
	}
	ctx := context.Background()
	// slots split in three, nodes introduced to each other
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
			if err != nil || !contains(splitLines(info), "cluster_state:ok") || !contains(splitLines(info), "cluster_slots_ok:16384") {
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
	return nodes
}

func addrsOf(nodes []*server) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.Addr())
	}
	return out
}

// ranges are the slots of each of startCluster's nodes.
var ranges = [][2]int64{{0, 5460}, {5461, 10922}, {10923, 16383}}

// idOn is an id whose key (under prefix) lives on node i.
func idOn(t *testing.T, nodes []*server, i int, prefix string) string {
	c := redis.NewClient(&redis.Options{Addr: nodes[0].Addr()})
	defer c.Close()
	for n := 0; ; n++ {
		id := "on" + strconv.Itoa(i) + "-" + strconv.Itoa(n)
		slot, err := c.ClusterKeySlot(context.Background(), prefix+id).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ranges[i][0] <= slot && slot <= ranges[i][1] {
			return id
		}
	}
}

// TestLiveCluster: the library loaded on each master by the client; ids spread over the
// slots; each adapter on the same cluster.
func TestLiveCluster(t *testing.T) {
	nodes := startCluster(t)
	eachAdapter(t, func(t *testing.T, a adapter) {
		ctx := context.Background()
		l := New(a.cluster(t, addrsOf(nodes)), Options{Prefix: a.name + ":"})
		if !l.conn.IsCluster() {
			t.Fatal("the adapter does not see a cluster")
		}
		callSet(t, l)
		exactlyTheLimit(t, l)
		before := keysPerNode(t, nodes)
		for i := 0; i < 30; i++ {
			d, err := l.Check(ctx, "spread"+strconv.Itoa(i), NewCall(1, 60))
			if err != nil || !d.Allowed() || d.Degraded() {
				t.Fatalf("id %d: %+v %v", i, d, err)
			}
		}
		for i, n := range keysPerNode(t, nodes) {
			if n == before[i] {
				t.Fatalf("%s holds no new key: the ids did not spread", nodes[i].Addr())
			}
		}
	})
	clusterFaults(t, nodes)
}

// clusterFaults: FUNCTION FLUSH on one primary (the next call there loads the library
// again), then one primary stopped: its keys are answered without Redis (fail-open) within
// the timeout and open the limiter's circuit; a probe on a key of a live primary closes it
// again, and the stopped primary's keys open it again.
func clusterFaults(t *testing.T, nodes []*server) {
	ctx := context.Background()
	limiters := map[string]*Limiter{}
	for _, a := range adapters {
		prefix := a.name + "-faults:"
		l := New(a.cluster(t, addrsOf(nodes)), Options{Prefix: prefix, Timeout: 300 * time.Millisecond, ProbeInterval: 30 * time.Millisecond})
		for i := range nodes {
			if d, err := l.Check(ctx, idOn(t, nodes, i, prefix), NewCall(5, 60)); err != nil || d.Degraded() {
				t.Fatalf("%s, node %d: %+v %v", a.name, i, d, err)
			}
		}
		limiters[a.name] = l
	}
	c := redis.NewClient(&redis.Options{Addr: nodes[0].Addr()})
	defer c.Close()
	for name, l := range limiters {
		if err := c.Do(ctx, "FUNCTION", "FLUSH").Err(); err != nil {
			t.Fatal(err)
		}
		loads := l.Stats().Loads
		d, err := l.Check(ctx, idOn(t, nodes, 0, name+"-faults:"), NewCall(5, 60))
		if err != nil || d.Degraded() || d.Summary.Count != 2 || l.Stats().Loads != loads+1 {
			t.Fatalf("%s after FUNCTION FLUSH on one primary: %+v %v %+v", name, d, err, l.Stats())
		}
	}
	nodes[2].Stop()
	for name, l := range limiters {
		prefix := name + "-faults:"
		dead, live := idOn(t, nodes[:1], 2, prefix), idOn(t, nodes[:1], 1, prefix)
		start := time.Now()
		d, err := l.Check(ctx, dead, NewCall(5, 60))
		if err != nil || !d.Degraded() || !d.Allowed() || time.Since(start) > 500*time.Millisecond || !l.Stats().Down {
			t.Fatalf("%s, a key of the stopped primary: %+v %v in %v %+v", name, d, err, time.Since(start), l.Stats())
		}
		if d, err := l.Check(ctx, live, NewCall(5, 60)); err != nil || !d.Degraded() {
			t.Fatalf("%s, a live primary's key with the circuit open: %+v %v", name, d, err)
		}
		driveProbes(t, l, func() (*MultiLimitResult, error) { return l.Peek(ctx, live, NewCall(5, 60)) })
		if d, err := l.Check(ctx, live, NewCall(5, 60)); err != nil || d.Degraded() || d.Summary.Count != 2 {
			t.Fatalf("%s, a live primary's key after the probe: %+v %v", name, d, err)
		}
		if d, err := l.Check(ctx, dead, NewCall(5, 60)); err != nil || !d.Degraded() || !l.Stats().Down {
			t.Fatalf("%s, the stopped primary's key again: %+v %v", name, d, err)
		}
		t.Logf("%s: %+v", name, l.Stats())
	}
}

func keysPerNode(t *testing.T, nodes []*server) []int64 {
	var out []int64
	for _, s := range nodes {
		c := redis.NewClient(&redis.Options{Addr: s.Addr()})
		n, err := c.DBSize(context.Background()).Result()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	return out
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
