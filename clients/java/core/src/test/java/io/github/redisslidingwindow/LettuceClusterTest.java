package io.github.redisslidingwindow;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.redisslidingwindow.jedis.JedisSendCommand;
import io.github.redisslidingwindow.lettuce.LettuceClusterSendCommand;
import io.lettuce.core.RedisURI;
import io.lettuce.core.cluster.RedisClusterClient;
import io.lettuce.core.cluster.api.StatefulRedisClusterConnection;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.TestMethodOrder;
import redis.clients.jedis.RedisClient;

/**
 * The limiter through a Lettuce {@link RedisClusterClient} on a cluster of 3 module primaries, each
 * with a replica: the live checks' body, routing by key, the library loaded on every primary and
 * never sent to a replica (for the Jedis cluster adapter too), and a closed connection.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class LettuceClusterTest {
  private TestCluster cluster;
  private RedisClusterClient client;
  private StatefulRedisClusterConnection<String, String> connection;
  private final Map<TestServer, RedisClient> direct = new HashMap<>();
  private List<TestServer> primaries;
  private List<TestServer> replicas;

  @BeforeAll
  void start() throws Exception {
    cluster = TestCluster.start(3, 1);
    List<RedisURI> seeds = new ArrayList<>();
    for (TestServer n : cluster.nodes) {
      seeds.add(RedisURI.create("127.0.0.1", n.port));
      direct.put(n, RedisClient.create("127.0.0.1", n.port));
    }
    client = RedisClusterClient.create(seeds);
    connection = client.connect();
    primaries = cluster.primaries();
    replicas = cluster.replicas();
    assertEquals(3, primaries.size());
    assertEquals(3, replicas.size());
  }

  @AfterAll
  void stop() throws Exception {
    for (RedisClient c : direct.values()) {
      c.close();
    }
    if (connection != null) {
      connection.close();
    }
    if (client != null) {
      client.shutdown();
    }
    if (cluster != null) {
      cluster.close();
    }
  }

  private RateLimiter limiter() {
    return RateLimiter.builder(new LettuceClusterSendCommand(connection)).build();
  }

  private static String id() {
    return "java:" + UUID.randomUUID();
  }

  private Object ask(TestServer n, String... command) {
    return new JedisSendCommand(direct.get(n)).send(List.of(command));
  }

  /** The primaries holding this key ({@link TestCluster#holds}). */
  private List<Integer> holders(String key) {
    List<Integer> out = new ArrayList<>();
    for (int i = 0; i < primaries.size(); i++) {
      if (TestCluster.holds(new JedisSendCommand(direct.get(primaries.get(i))), key)) {
        out.add(i);
      }
    }
    return out;
  }

  /** A node's calls and rejected calls of FUNCTION LOAD (INFO commandstats). */
  private long[] functionLoads(TestServer n) {
    String stats = Replies.show(ask(n, "INFO", "commandstats"));
    Matcher m =
        Pattern.compile("cmdstat_function\\|load:calls=(\\d+),.*?rejected_calls=(\\d+)")
            .matcher(stats);
    return m.find()
        ? new long[] {Long.parseLong(m.group(1)), Long.parseLong(m.group(2))}
        : new long[] {0, 0};
  }

  @Test
  @Order(1)
  void checkPeekRefundCounts() {
    LiveChecks.checkPeekRefundCounts(limiter(), id(), Mode.MODULE, "lettuce cluster");
  }

  @Test
  @Order(2)
  void severalLimits() {
    LiveChecks.severalLimits(limiter(), id());
  }

  @Test
  @Order(3)
  void fiftyThreadsOnOneIdentityGetExactlyTheLimit() throws Exception {
    LiveChecks.fiftyThreadsGetExactlyTheLimit(limiter(), id(), "lettuce cluster");
  }

  @Test
  @Order(4)
  void callsRouteByKeyAndIdentitiesSpreadOverThePrimaries() {
    RateLimiter l = limiter();
    Map<Integer, Integer> perNode = new HashMap<>();
    for (int i = 0; i < 30; i++) {
      String id = id();
      assertTrue(l.check(id, 2, 3600).allowed());
      assertEquals(2, l.check(id, 2, 3600).count());
      assertFalse(l.check(id, 2, 3600).allowed());
      List<Integer> h = holders("rate:" + id);
      assertEquals(1, h.size(), "one primary holds " + id + ": " + h);
      perNode.merge(h.get(0), 1, Integer::sum);
      l.reset(id);
      assertEquals(List.of(), holders("rate:" + id), "reset deleted it on its primary");
    }
    assertEquals(3, perNode.size(), "30 identities over 3 primaries: " + perNode);
  }

  private void theLibraryOnEveryPrimaryNeverSentToAReplica(SendCommand sender, String prefix) {
    theLibraryOnEveryPrimaryNeverSentToAReplica(sender, prefix, false);
  }

  private void theLibraryOnEveryPrimaryNeverSentToAReplica(
      SendCommand sender, String prefix, boolean async) {
    Map<TestServer, long[]> before = new HashMap<>();
    for (TestServer p : primaries) {
      ask(p, "FUNCTION", "FLUSH"); // replicated to its replica
    }
    for (TestServer n : cluster.nodes) {
      before.put(n, functionLoads(n));
    }
    RateLimiter l = RateLimiter.builder(sender).backend(Backend.LIBRARY).prefix(prefix).build();
    List<String> ids = new ArrayList<>();
    for (int i = 0; i < 30; i++) {
      ids.add(id());
    }
    for (String id : ids) {
      LimitResult r = async ? l.checkAsync(id, 5, 3600).join() : l.check(id, 5, 3600);
      assertTrue(r.allowed(), r.toString());
      assertFalse(r.degraded());
    }
    assertEquals(Mode.FUNCTION, l.mode());
    for (TestServer p : primaries) {
      assertEquals(
          Library.version(),
          Replies.show(ask(p, "FCALL_RO", "slidingwindow_version", "0")),
          "primary " + p.port + " has the library");
      long[] loads = functionLoads(p);
      assertEquals(1, loads[0] - before.get(p)[0], "one FUNCTION LOAD on primary " + p.port);
    }
    for (TestServer r : replicas) {
      long[] loads = functionLoads(r);
      assertEquals(0, loads[1] - before.get(r)[1], "no FUNCTION LOAD refused by replica " + r.port);
    }
    // One primary loses it: the calls routed there find it missing, the limiter loads it again
    // (on every primary) and the keys count on.
    ask(primaries.get(1), "FUNCTION", "FLUSH");
    for (String id : ids) {
      LimitResult r = async ? l.checkAsync(id, 5, 3600).join() : l.check(id, 5, 3600);
      assertTrue(r.allowed());
      assertEquals(2, r.count(), id);
    }
    for (TestServer r : replicas) {
      assertEquals(0, functionLoads(r)[1] - before.get(r)[1], "replica " + r.port);
    }
  }

  @Test
  @Order(5)
  void lettuceLoadsTheLibraryOnEveryPrimaryAndNeverOnAReplica() {
    theLibraryOnEveryPrimaryNeverSentToAReplica(
        new LettuceClusterSendCommand(connection), "lettuce-lib:");
  }

  @Test
  @Order(5)
  void lettuceAsyncLoadsTheLibraryOnEveryPrimaryAndNeverOnAReplica() {
    theLibraryOnEveryPrimaryNeverSentToAReplica(
        new LettuceClusterSendCommand(connection), "lettuce-async-lib:", true);
  }

  @Test
  @Order(3)
  void fiftyAsyncCallsInFlightGetExactlyTheLimit() {
    RateLimiter l = limiter();
    assertTrue(l.isAsync());
    String id = id();
    List<java.util.concurrent.CompletableFuture<LimitResult>> all = new ArrayList<>();
    for (int i = 0; i < 50; i++) {
      all.add(l.checkAsync(id, 20, 3600));
    }
    long allowed =
        all.stream()
            .map(java.util.concurrent.CompletableFuture::join)
            .filter(LimitResult::allowed)
            .count();
    assertEquals(20, allowed);
    assertEquals(20, l.peekAsync(id, 20, 3600, CallOptions.defaults()).join().count());
  }

  @Test
  @Order(6)
  void jedisLoadsTheLibraryOnEveryPrimaryAndNeverOnAReplica() {
    try (redis.clients.jedis.RedisClusterClient jedis =
        redis.clients.jedis.RedisClusterClient.create(cluster.seeds())) {
      theLibraryOnEveryPrimaryNeverSentToAReplica(new JedisSendCommand(jedis), "jedis-lib:");
    }
  }

  @Test
  @Order(7)
  void aClosedConnectionIsAnOutage() {
    StatefulRedisClusterConnection<String, String> c = client.connect();
    RateLimiter l = RateLimiter.builder(new LettuceClusterSendCommand(c)).build();
    String id = id();
    assertTrue(l.check(id, 1, 3600).allowed());
    c.close();
    LimitResult r = l.check(id, 1, 3600);
    assertTrue(r.degraded(), r.toString());
    assertTrue(r.allowed(), "fail-open");
    assertTrue(l.isDown());
  }
}
