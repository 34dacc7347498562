package io.github.redisslidingwindow.boot;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.redisslidingwindow.LimitResult;
import io.github.redisslidingwindow.Mode;
import io.github.redisslidingwindow.RateLimiter;
import io.github.redisslidingwindow.TestCluster;
import io.github.redisslidingwindow.TestServer;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.UUID;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;
import org.springframework.boot.SpringApplication;
import org.springframework.context.ConfigurableApplicationContext;

/**
 * spring.data.redis.cluster.nodes: the starter's limiter on a 3-primary cluster of module nodes.
 */
class StarterClusterTest {
  @Test
  void clusterNodesMakeAClusterLimiterRoutingByKey() throws Exception {
    try (TestCluster cluster = TestCluster.start(3)) {
      String nodes =
          cluster.nodes.stream().map(n -> "127.0.0.1:" + n.port).collect(Collectors.joining(","));
      try (ConfigurableApplicationContext app =
          SpringApplication.run(
              StarterTestApp.class,
              "--spring.main.web-application-type=none",
              "--spring.main.banner-mode=off",
              "--spring.data.redis.cluster.nodes=" + nodes)) {
        RateLimiter l = app.getBean(RateLimiter.class);
        assertTrue(l.isAsync());
        Set<Integer> holders = new HashSet<>();
        for (int i = 0; i < 30; i++) {
          String id = "c-" + UUID.randomUUID();
          for (int j = 1; j <= 2; j++) {
            LimitResult r = j == 1 ? l.check(id, 2, 3600) : l.checkAsync(id, 2, 3600).join();
            assertTrue(r.allowed());
            assertFalse(r.degraded());
            assertEquals(j, r.count());
          }
          assertFalse(l.check(id, 2, 3600).allowed());
          holders.add(holder(cluster.nodes, "rate:" + id));
        }
        assertEquals(Mode.MODULE, l.mode());
        assertEquals(3, holders.size(), "30 identities over the 3 primaries: " + holders);
      }
    }
  }

  /**
   * The port of the node that has the key: each node asked directly ({@code TestCluster.holds}).
   */
  private static int holder(List<TestServer> nodes, String key) {
    for (TestServer n : nodes) {
      try (redis.clients.jedis.RedisClient c =
          redis.clients.jedis.RedisClient.create("127.0.0.1", n.port)) {
        var send = new io.github.redisslidingwindow.jedis.JedisSendCommand(c);
        if (io.github.redisslidingwindow.TestCluster.holds(send, key)) {
          return n.port;
        }
      }
    }
    throw new AssertionError("no node has " + key);
  }
}
