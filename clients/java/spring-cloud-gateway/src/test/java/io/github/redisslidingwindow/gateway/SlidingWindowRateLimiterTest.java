package io.github.redisslidingwindow.gateway;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.redisslidingwindow.CallOptions;
import io.github.redisslidingwindow.Limit;
import io.github.redisslidingwindow.MultiLimitResult;
import io.github.redisslidingwindow.RateException;
import io.github.redisslidingwindow.RateLimiter;
import io.github.redisslidingwindow.TestServer;
import io.github.redisslidingwindow.lettuce.LettuceSendCommand;
import io.lettuce.core.ClientOptions;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import io.lettuce.core.TimeoutOptions;
import io.lettuce.core.api.StatefulRedisConnection;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.springframework.beans.factory.support.DefaultListableBeanFactory;
import org.springframework.boot.convert.ApplicationConversionService;
import org.springframework.cloud.gateway.event.FilterArgsEvent;
import org.springframework.cloud.gateway.filter.ratelimit.RateLimiter.Response;
import org.springframework.cloud.gateway.support.ConfigurationService;

/** The gateway's RateLimiter on a real module server through Lettuce (no Spring context). */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class SlidingWindowRateLimiterTest {
  private TestServer server;
  private RedisClient client;
  private StatefulRedisConnection<String, String> connection;

  @BeforeAll
  void start() throws Exception {
    server = TestServer.start(TestServer.Kind.MODULE);
    client = RedisClient.create(RedisURI.create("127.0.0.1", server.port));
    connection = client.connect();
  }

  @AfterAll
  void stop() throws Exception {
    if (connection != null) {
      connection.close();
    }
    if (client != null) {
      client.shutdown();
    }
    if (server != null) {
      server.close();
    }
  }

  private static ConfigurationService configurationService() {
    return new ConfigurationService(
        new DefaultListableBeanFactory(),
        ApplicationConversionService::getSharedInstance,
        () -> null);
  }

  private SlidingWindowRateLimiter gatewayLimiter(RateLimiter core) {
    return new SlidingWindowRateLimiter(core, configurationService());
  }

  private RateLimiter core() {
    return RateLimiter.builder(new LettuceSendCommand(connection)).build();
  }

  private static Response ask(SlidingWindowRateLimiter l, String route, String id) {
    Response r = l.isAllowed(route, id).block(Duration.ofSeconds(10));
    assertNotNull(r);
    return r;
  }

  /**
   * The deny cache is on by default: 20 requests on one refused identity cost Redis 3 CHECKs (2
   * allowed, the refusal that is then cached), and every one answers the same; {@code
   * denyCache(null)} sends all 20. Through the async path (Lettuce) and the blocking one.
   */
  @Test
  void denyCacheByDefaultAndOff() throws Exception {
    LettuceSendCommand lettuce = new LettuceSendCommand(connection);
    RateLimiter blocking = RateLimiter.builder(lettuce::send).build();
    for (RateLimiter core : List.of(core(), blocking)) {
      for (boolean cached : new boolean[] {true, false}) {
        SlidingWindowRateLimiter l = gatewayLimiter(core);
        if (!cached) {
          l.denyCache(null);
        }
        assertEquals(cached, l.limiter().denyCache() != null);
        l.getConfig().put("r", new SlidingWindowRateLimiter.Config().setRates("2/minute"));
        String id = UUID.randomUUID().toString();
        long before = server.calls("slidingwindow.check");
        int refused = 0;
        for (int i = 0; i < 20; i++) {
          Response r = ask(l, "r", id);
          if (!r.isAllowed()) {
            refused++;
            long retry = Long.parseLong(r.getHeaders().get("Retry-After"));
            assertTrue(retry >= 1 && retry <= 60, "Retry-After " + retry);
          }
        }
        String label = (core.isAsync() ? "async" : "blocking") + ", cache " + cached;
        assertEquals(18, refused, label);
        assertEquals(
            cached ? 3 : 20,
            server.calls("slidingwindow.check") - before,
            label + ": CHECKs Redis saw for 20 requests");
      }
    }
  }

  /**
   * The async path (Lettuce) answers on Lettuce's I/O thread; a blocking sender's call runs on the
   * scheduler (boundedElastic), never on the subscriber's thread. Both count the same.
   */
  @Test
  void asyncSenderBlocksNoThreadAndABlockingOneRunsOnTheScheduler() {
    RateLimiter async = core();
    assertTrue(async.isAsync());
    LettuceSendCommand lettuce = new LettuceSendCommand(connection);
    java.util.Set<String> blockingThreads = java.util.concurrent.ConcurrentHashMap.newKeySet();
    RateLimiter blocking =
        RateLimiter.builder(
                cmd -> {
                  blockingThreads.add(Thread.currentThread().getName());
                  return lettuce.send(cmd);
                })
            .build();
    assertFalse(blocking.isAsync());
    for (RateLimiter core : List.of(async, blocking)) {
      List<String> told = new java.util.concurrent.CopyOnWriteArrayList<>();
      SlidingWindowRateLimiter l =
          gatewayLimiter(core)
              .listener(
                  (policy, outcome, allowed) -> told.add(policy + " " + outcome + " " + allowed));
      l.getConfig().put("r", new SlidingWindowRateLimiter.Config().setRates("2/minute"));
      String user = "u-" + UUID.randomUUID();
      assertTrue(ask(l, "r", user).isAllowed());
      assertTrue(ask(l, "r", user).isAllowed());
      assertFalse(ask(l, "r", user).isAllowed());
      assertEquals(List.of("r ALLOWED true", "r ALLOWED true", "r REFUSED false"), told);
    }
    assertFalse(blockingThreads.isEmpty());
    for (String t : blockingThreads) {
      assertTrue(t.startsWith("boundedElastic"), t);
    }
  }

  @Test
  void routeArgsBindAndTheLimitsHold() {
    SlidingWindowRateLimiter l = gatewayLimiter(core());
    l.onApplicationEvent(
        new FilterArgsEvent(
            this,
            "orders",
            Map.of(
                "key-resolver", "#{@userKeyResolver}",
                "sliding-window-rate-limiter.rates", "3/minute;5/hour",
                "sliding-window-rate-limiter.policy", "orders-api")));
    // another filter's args on another route: not ours, ignored
    l.onApplicationEvent(new FilterArgsEvent(this, "other", Map.of("name", "x")));
    assertEquals(Map.of("orders", l.getConfig().get("orders")), l.getConfig());
    assertEquals(
        List.of(new Limit(3, 60_000), new Limit(5, 3_600_000)),
        l.getConfig().get("orders").limits());

    String user = "u-" + UUID.randomUUID();
    for (int i = 1; i <= 3; i++) {
      Response r = ask(l, "orders", user);
      assertTrue(r.isAllowed(), "request " + i);
      Map<String, String> h = r.getHeaders();
      assertEquals("3", h.get("X-RateLimit-Limit"));
      assertEquals(Long.toString(3 - i), h.get("X-RateLimit-Remaining"));
      assertEquals(
          "\"orders-api/60s\";q=3;w=60, \"orders-api/3600s\";q=5;w=3600",
          h.get("RateLimit-Policy"));
      assertFalse(h.containsKey("Retry-After"));
    }
    Response denied = ask(l, "orders", user);
    assertFalse(denied.isAllowed());
    long retry = Long.parseLong(denied.getHeaders().get("Retry-After"));
    // The same decision asked of the core right after: its retry_after (ms) rounds up to the
    // header, less the few milliseconds between the two calls.
    MultiLimitResult peek =
        core()
            .peekLimits(
                "orders:" + user,
                l.getConfig().get("orders").limits(),
                CallOptions.defaults().ms());
    assertFalse(peek.allowed());
    assertTrue(
        peek.retryAfter() <= retry * 1000 && peek.retryAfter() > retry * 1000 - 1000 - 500,
        "Retry-After " + retry + " s, retry_after now " + peek.retryAfter() + " ms");
    assertTrue(retry >= 1 && retry <= 120, "a minute window: " + retry);

    // Keys are per route: the same user on another route counts from zero.
    l.getConfig().put("search", new SlidingWindowRateLimiter.Config().setLimit(1L).setWindow(60L));
    assertTrue(ask(l, "search", user).isAllowed());
    assertFalse(ask(l, "search", user).isAllowed());
  }

  @Test
  void costAndLimitWindowPairs() {
    SlidingWindowRateLimiter l = gatewayLimiter(core());
    l.onApplicationEvent(
        new FilterArgsEvent(
            this,
            "upload",
            Map.of(
                "sliding-window-rate-limiter.limit", "10",
                "sliding-window-rate-limiter.window", "3600",
                "sliding-window-rate-limiter.cost", "4")));
    SlidingWindowRateLimiter.Config c = l.getConfig().get("upload");
    assertEquals(4, c.getCost());
    assertEquals(List.of(new Limit(10, 3_600_000)), c.limits());
    String user = "u-" + UUID.randomUUID();
    assertEquals("6", ask(l, "upload", user).getHeaders().get("X-RateLimit-Remaining"));
    assertEquals("2", ask(l, "upload", user).getHeaders().get("X-RateLimit-Remaining"));
    Response denied = ask(l, "upload", user);
    assertFalse(denied.isAllowed(), "8 + 4 > 10");
    assertEquals(
        "\"upload\";q=10;w=3600", denied.getHeaders().get("RateLimit-Policy"), "one limit");
  }

  @Test
  void defaultFiltersConfigAndMissingConfig() {
    SlidingWindowRateLimiter l = gatewayLimiter(core());
    assertThrows(IllegalArgumentException.class, () -> l.isAllowed("nowhere", "u").block());
    l.getConfig().put("defaultFilters", new SlidingWindowRateLimiter.Config().setRates("1/hour"));
    String user = "u-" + UUID.randomUUID();
    assertTrue(ask(l, "any", user).isAllowed());
    assertFalse(ask(l, "any", user).isAllowed());
    l.getConfig().put("bad", new SlidingWindowRateLimiter.Config().setRates("ten per second"));
    assertThrows(RateException.class, () -> l.isAllowed("bad", "u").block());
    l.getConfig().put("half", new SlidingWindowRateLimiter.Config().setLimit(3L));
    assertThrows(IllegalArgumentException.class, () -> l.isAllowed("half", "u").block());
  }

  @Test
  void outageAnswersAsTheCircuitSays() throws Exception {
    TestServer s = TestServer.start(TestServer.Kind.MODULE);
    RedisClient c = RedisClient.create(RedisURI.create("127.0.0.1", s.port));
    c.setOptions(
        ClientOptions.builder()
            .disconnectedBehavior(ClientOptions.DisconnectedBehavior.REJECT_COMMANDS)
            .timeoutOptions(TimeoutOptions.enabled(Duration.ofMillis(500)))
            .build());
    try (StatefulRedisConnection<String, String> conn = c.connect()) {
      SlidingWindowRateLimiter open =
          gatewayLimiter(RateLimiter.builder(new LettuceSendCommand(conn)).build());
      SlidingWindowRateLimiter closed =
          gatewayLimiter(RateLimiter.builder(new LettuceSendCommand(conn)).failOpen(false).build());
      for (SlidingWindowRateLimiter l : List.of(open, closed)) {
        l.getConfig().put("r", new SlidingWindowRateLimiter.Config().setRates("1/minute"));
      }
      String user = "u-" + UUID.randomUUID();
      assertTrue(ask(open, "r", user).isAllowed());
      assertFalse(ask(closed, "r", user).isAllowed(), "Redis up: the limit holds");
      s.close();
      Response a = ask(open, "r", user);
      assertTrue(a.isAllowed(), "Redis stopped: fail-open by default");
      assertEquals(Map.of(), a.getHeaders(), "a degraded answer has no headers");
      assertTrue(open.limiter().isDown());
      Response b = ask(closed, "r", "u-" + UUID.randomUUID());
      assertFalse(b.isAllowed(), "fail-closed denies a fresh identity");
      assertEquals(Map.of(), b.getHeaders());
    } finally {
      c.shutdown();
      s.close();
    }
  }
}
