package io.github.redisslidingwindow;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.redisslidingwindow.jedis.JedisSendCommand;
import io.github.redisslidingwindow.lettuce.LettuceClusterSendCommand;
import io.lettuce.core.RedisURI;
import io.lettuce.core.TimeoutOptions;
import io.lettuce.core.cluster.ClusterClientOptions;
import io.lettuce.core.cluster.api.StatefulRedisClusterConnection;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.RedisClient;
import redis.clients.jedis.RedisClusterClient;

/**
 * The cluster fault cases for both cluster adapters (Jedis {@link RedisClusterClient}, Lettuce
 * {@link LettuceClusterSendCommand}) on one cluster of 3 library-only primaries without replicas,
 * 300 ms client timeouts: FUNCTION FLUSH on one primary (the library loaded there again, the counts
 * go on), then one primary stopped: its keys are answered without Redis (fail-open) and open the
 * limiter's circuit; a probe on a live primary's key closes it and the counts there go on; the
 * stopped primary's keys open it again.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class ClusterFaultTest {
  private static final int TIMEOUT_MS = 300;

  private TestCluster cluster;
  private List<TestServer> nodes;
  private RedisClusterClient jedis;
  private io.lettuce.core.cluster.RedisClusterClient lettuce;
  private StatefulRedisClusterConnection<String, String> conn;

  /** The slot ranges of each node: [from, to] pairs, by node index. */
  private final Map<Integer, List<long[]>> slots = new LinkedHashMap<>();

  @BeforeAll
  void start() throws Exception {
    cluster = TestCluster.start(3, 0, TestServer.Kind.LIBRARY_ONLY);
    nodes = cluster.nodes;
    DefaultJedisClientConfig timeouts =
        DefaultJedisClientConfig.builder()
            .socketTimeoutMillis(TIMEOUT_MS)
            .connectionTimeoutMillis(TIMEOUT_MS)
            .build();
    jedis =
        RedisClusterClient.builder()
            .nodes(cluster.seeds())
            .clientConfig(timeouts)
            .maxAttempts(2)
            .maxTotalRetriesDuration(Duration.ofMillis(TIMEOUT_MS))
            .build();
    List<RedisURI> seeds = new ArrayList<>();
    for (TestServer n : nodes) {
      seeds.add(
          RedisURI.builder()
              .withHost("127.0.0.1")
              .withPort(n.port)
              .withTimeout(Duration.ofMillis(TIMEOUT_MS))
              .build());
    }
    lettuce = io.lettuce.core.cluster.RedisClusterClient.create(seeds);
    lettuce.setOptions(
        ClusterClientOptions.builder()
            .timeoutOptions(TimeoutOptions.enabled(Duration.ofMillis(TIMEOUT_MS)))
            .build());
    conn = lettuce.connect();
    try (RedisClient c = RedisClient.create("127.0.0.1", nodes.get(0).port)) {
      for (Object range : (List<?>) new JedisSendCommand(c).send(List.of("CLUSTER", "SLOTS"))) {
        List<?> r = (List<?>) range;
        long port = (Long) ((List<?>) r.get(2)).get(1);
        for (int i = 0; i < nodes.size(); i++) {
          if (nodes.get(i).port == port) {
            slots
                .computeIfAbsent(i, k -> new ArrayList<>())
                .add(new long[] {(Long) r.get(0), (Long) r.get(1)});
          }
        }
      }
    }
    assertEquals(3, slots.size(), "every primary has slots");
  }

  @AfterAll
  void stop() throws Exception {
    if (conn != null) {
      conn.close();
    }
    if (lettuce != null) {
      lettuce.shutdown();
    }
    if (jedis != null) {
      jedis.close();
    }
    if (cluster != null) {
      cluster.close();
    }
  }

  /** The CRC16 (XMODEM) of Redis Cluster's key slots. */
  private static int slot(String key) {
    byte[] b = key.getBytes(StandardCharsets.UTF_8);
    int crc = 0;
    for (byte x : b) {
      crc ^= (x & 0xff) << 8;
      for (int i = 0; i < 8; i++) {
        crc = (crc & 0x8000) != 0 ? (crc << 1) ^ 0x1021 : crc << 1;
        crc &= 0xffff;
      }
    }
    return crc % 16384;
  }

  /** An id whose key (prefix + id) is on node i. */
  private String idOn(int node, String prefix) {
    for (int n = 0; ; n++) {
      String id = "id" + n;
      long s = slot(prefix + id);
      for (long[] r : slots.get(node)) {
        if (s >= r[0] && s <= r[1]) {
          return id;
        }
      }
    }
  }

  private RateLimiter limiter(String name, String prefix) {
    SendCommand send =
        name.equals("jedis") ? new JedisSendCommand(jedis) : new LettuceClusterSendCommand(conn);
    return RateLimiter.builder(send)
        .prefix(prefix)
        .probeInterval(Duration.ofMillis(400))
        .denyCache(new DenyCache())
        .build();
  }

  private static LimitResult check(RateLimiter l, String id) {
    return l.check(id, 5, 60);
  }

  @Test
  void functionFlushOnOnePrimaryThenOnePrimaryStopped() throws Exception {
    Map<String, RateLimiter> limiters = new LinkedHashMap<>();
    for (String name : List.of("jedis", "lettuce")) {
      String prefix = name + "-faults:";
      RateLimiter l = limiter(name, prefix);
      for (int i = 0; i < nodes.size(); i++) {
        LimitResult r = check(l, idOn(i, prefix));
        assertFalse(r.degraded(), name + ", node " + i + ": " + r);
        assertEquals(1, r.count(), name + ", node " + i);
      }
      assertEquals(Mode.FUNCTION, l.mode());
      limiters.put(name, l);
    }
    TestServer first = nodes.get(0);
    try (RedisClient c = RedisClient.create("127.0.0.1", first.port)) {
      JedisSendCommand node0 = new JedisSendCommand(c);
      for (Map.Entry<String, RateLimiter> e : limiters.entrySet()) {
        String name = e.getKey();
        RateLimiter l = e.getValue();
        node0.send(List.of("FUNCTION", "FLUSH"));
        assertEquals(List.of(), node0.send(List.of("FUNCTION", "LIST")), "flushed");
        long loads = first.calls("function|load");
        LimitResult r = check(l, idOn(0, name + "-faults:"));
        assertFalse(r.degraded(), name + " after FUNCTION FLUSH on one primary: " + r);
        assertEquals(2, r.count(), name + ": the count there goes on");
        assertEquals(loads + 1, first.calls("function|load"), name + ": loaded there again");
        assertEquals(1, ((List<?>) node0.send(List.of("FUNCTION", "LIST"))).size());
        for (int i = 1; i < nodes.size(); i++) {
          assertEquals(2, check(l, idOn(i, name + "-faults:")).count(), name + ", node " + i);
        }
      }
    }
    nodes.get(2).close();
    for (Map.Entry<String, RateLimiter> e : limiters.entrySet()) {
      String name = e.getKey();
      RateLimiter l = e.getValue();
      String prefix = name + "-faults:";
      String dead = idOn(2, prefix);
      String live = idOn(1, prefix);
      long t = System.nanoTime();
      LimitResult d = check(l, dead);
      long took = (System.nanoTime() - t) / 1_000_000;
      assertTrue(d.degraded() && d.allowed(), name + ", a key of the stopped primary: " + d);
      assertTrue(took < 3 * TIMEOUT_MS + 500, name + ": answered in " + took + " ms");
      System.out.println(name + ": a stopped primary's key answered degraded in " + took + " ms");
      assertTrue(l.isDown(), name + ": the circuit opened");
      // no probe before the interval (400 ms): answered without Redis
      assertTrue(check(l, live).degraded(), name + ", a live key with the circuit open");
      long deadline = System.nanoTime() + 10_000_000_000L;
      while (l.peek(live, 5, 60).degraded()) {
        assertTrue(System.nanoTime() < deadline, name + ": no probe got through in 10 s");
        Thread.sleep(10);
      }
      assertFalse(l.isDown(), name + ": the probe on a live primary closed the circuit");
      LimitResult r = check(l, live);
      assertFalse(r.degraded(), name + ", a live key after the probe: " + r);
      assertEquals(3, r.count(), name + ": the live primary's count goes on");
      LimitResult again = check(l, dead);
      assertTrue(again.degraded(), name + ", the stopped primary's key again: " + again);
      assertTrue(l.isDown(), name + ": the circuit open again");
    }
  }
}
