package io.github.redisslidingwindow;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.redisslidingwindow.jedis.JedisSendCommand;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import redis.clients.jedis.RedisClient;
import redis.clients.jedis.RedisClusterClient;

/** The limiter through a Jedis {@link RedisClusterClient} on a 3-master cluster of module nodes. */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class JedisClusterTest {
  private TestCluster cluster;
  private RedisClusterClient client;
  private final List<RedisClient> direct = new ArrayList<>();

  @BeforeAll
  void start() throws Exception {
    cluster = TestCluster.start(3);
    client = RedisClusterClient.create(cluster.seeds());
    for (TestServer n : cluster.nodes) {
      direct.add(RedisClient.create("127.0.0.1", n.port));
    }
  }

  @AfterAll
  void stop() throws Exception {
    for (RedisClient c : direct) {
      c.close();
    }
    if (client != null) {
      client.close();
    }
    if (cluster != null) {
      cluster.close();
    }
  }

  private static String id() {
    return "java:" + UUID.randomUUID();
  }

  /** Which nodes (their indexes) hold this key ({@link TestCluster#holds}). */
  private List<Integer> holders(String key) {
    List<Integer> out = new ArrayList<>();
    for (int i = 0; i < direct.size(); i++) {
      JedisSendCommand node = new JedisSendCommand(direct.get(i));
      if (TestCluster.holds(node, key)) {
        out.add(i);
      }
    }
    return out;
  }

  @Test
  void callsRouteByKeyAndIdentitiesSpreadOverTheNodes() {
    RateLimiter l = RateLimiter.builder(new JedisSendCommand(client)).build();
    Map<Integer, Integer> perNode = new HashMap<>();
    for (int i = 0; i < 30; i++) {
      String id = id();
      for (int j = 1; j <= 2; j++) {
        LimitResult r = l.check(id, 2, 3600);
        assertTrue(r.allowed(), id + " check " + j);
        assertEquals(j, r.count());
        assertFalse(r.degraded());
      }
      assertFalse(l.check(id, 2, 3600).allowed());
      assertEquals(Mode.MODULE, l.mode());
      assertEquals(2, l.peek(id, 2, 3600).count());
      assertEquals(2, l.refund(id, 2, 3600).count(), "the estimate with this request");
      assertEquals(1, l.counts(id, 3600, CallOptions.defaults()).current());
      MultiLimitResult m = l.checkLimits(id, "5/minute;2/hour", CallOptions.defaults());
      assertTrue(m.allowed(), "one of two left in the hour: " + m);
      List<Integer> h = holders("rate:" + id);
      assertEquals(1, h.size(), "one node holds " + id + ": " + h);
      perNode.merge(h.get(0), 1, Integer::sum);
      l.reset(id);
      assertEquals(List.of(), holders("rate:" + id), "reset deleted it on its node");
    }
    assertEquals(3, perNode.size(), "30 identities over 3 masters: " + perNode);
  }

  @Test
  void fiftyThreadsOnOneIdentityGetExactlyTheLimit() throws Exception {
    LiveChecks.fiftyThreadsGetExactlyTheLimit(
        RateLimiter.builder(new JedisSendCommand(client)).build(), id(), "cluster");
  }

  @Test
  void checkPeekRefundCounts() {
    LiveChecks.checkPeekRefundCounts(
        RateLimiter.builder(new JedisSendCommand(client)).build(), id(), Mode.MODULE, "cluster");
  }

  @Test
  void theLibraryIsLoadedOnEveryPrimaryAndAgainAfterOneFlushes() {
    RateLimiter l =
        RateLimiter.builder(new JedisSendCommand(client))
            .backend(Backend.LIBRARY)
            .prefix("lib:")
            .build();
    List<String> ids = new ArrayList<>();
    for (int i = 0; i < 30; i++) {
      ids.add(id());
    }
    for (String id : ids) {
      assertTrue(l.check(id, 5, 3600).allowed());
    }
    assertEquals(Mode.FUNCTION, l.mode());
    for (int i = 0; i < direct.size(); i++) {
      Object version =
          new JedisSendCommand(direct.get(i))
              .send(List.of("FCALL_RO", "slidingwindow_version", "0"));
      assertEquals(Library.version(), Replies.show(version), "node " + i + " has the library");
    }
    // One primary loses it: the calls routed there find it missing, the limiter loads it again
    // (on every primary) and the keys count on.
    new JedisSendCommand(direct.get(1)).send(List.of("FUNCTION", "FLUSH"));
    for (String id : ids) {
      LimitResult r = l.check(id, 5, 3600);
      assertTrue(r.allowed());
      assertEquals(2, r.count(), id);
    }
  }
}
