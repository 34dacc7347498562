package io.github.redisslidingwindow;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.redisslidingwindow.jedis.JedisSendCommand;
import java.util.List;
import java.util.UUID;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import redis.clients.jedis.RedisClient;

/** The limiter through Jedis on real servers: module, library-only Redis 7.0, Redis 6.2. */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class LiveTest {
  private final java.util.Map<TestServer.Kind, TestServer> servers =
      new java.util.EnumMap<>(TestServer.Kind.class);
  private final java.util.Map<TestServer.Kind, RedisClient> clients =
      new java.util.EnumMap<>(TestServer.Kind.class);

  @BeforeAll
  void start() throws Exception {
    for (TestServer.Kind k : TestServer.Kind.values()) {
      TestServer s = TestServer.start(k);
      servers.put(k, s);
      clients.put(k, RedisClient.create("127.0.0.1", s.port));
    }
  }

  @AfterAll
  void stop() throws Exception {
    for (RedisClient c : clients.values()) {
      c.close();
    }
    for (TestServer s : servers.values()) {
      s.close();
    }
  }

  private RateLimiter limiter(TestServer.Kind k) {
    return RateLimiter.builder(new JedisSendCommand(clients.get(k))).build();
  }

  private static String id() {
    return "java:" + UUID.randomUUID();
  }

  private static Mode expectedMode(TestServer.Kind k) {
    return switch (k) {
      case MODULE -> Mode.MODULE;
      case LIBRARY_ONLY -> Mode.FUNCTION;
      case REDIS62 -> Mode.EVAL;
    };
  }

  @ParameterizedTest
  @EnumSource(TestServer.Kind.class)
  void checkPeekRefundCounts(TestServer.Kind k) {
    LiveChecks.checkPeekRefundCounts(limiter(k), id(), expectedMode(k), k.toString());
  }

  @ParameterizedTest
  @EnumSource(TestServer.Kind.class)
  void costAndNever(TestServer.Kind k) {
    RateLimiter l = limiter(k);
    String id = id();
    LimitResult r = l.check(id, 10, 3600, CallOptions.defaults().cost(4));
    assertTrue(r.allowed());
    assertEquals(4, r.count());
    assertEquals(6, r.remaining());
    r = l.check(id, 10, 3600, CallOptions.defaults().cost(7));
    assertFalse(r.allowed(), "4 + 7 > 10");
    assertEquals(4, r.count());
    assertTrue(r.retryAfter() > 0);
    LimitResult never = l.check(id, 10, 3600, CallOptions.defaults().cost(11));
    assertFalse(never.allowed());
    assertEquals(-1, never.retryAfter(), "cost > limit: never");
    assertTrue(never.retryAfterSeconds().isEmpty());
  }

  @ParameterizedTest
  @EnumSource(TestServer.Kind.class)
  void severalLimitsAndRateStrings(TestServer.Kind k) {
    LiveChecks.severalLimits(limiter(k), id());
  }

  @ParameterizedTest
  @EnumSource(TestServer.Kind.class)
  void isAllowedAndExplicitNow(TestServer.Kind k) {
    RateLimiter l = limiter(k);
    String id = id();
    long now = 1_780_000_000L;
    assertTrue(l.isAllowed(id, 1, 10, now).allowed());
    IsAllowedResult second = l.isAllowed(id, 1, 10, now);
    assertFalse(second.allowed());
    assertEquals(1, second.count());
    assertTrue(l.isAllowed(id, 1, 10, now + 20).allowed(), "two windows later");
  }

  @ParameterizedTest
  @EnumSource(TestServer.Kind.class)
  void fiftyThreadsGetExactlyTheLimit(TestServer.Kind k) throws Exception {
    LiveChecks.fiftyThreadsGetExactlyTheLimit(limiter(k), id(), k.toString());
  }

  @Test
  void libraryReloadedAfterFunctionFlush() {
    RateLimiter l = limiter(TestServer.Kind.LIBRARY_ONLY);
    String id = id();
    assertTrue(l.check(id, 5, 3600).allowed());
    assertEquals(Mode.FUNCTION, l.mode());
    new JedisSendCommand(clients.get(TestServer.Kind.LIBRARY_ONLY))
        .send(List.of("FUNCTION", "FLUSH"));
    LimitResult r = l.check(id, 5, 3600);
    assertTrue(r.allowed());
    assertEquals(2, r.count(), "the key survived; the library was loaded again");
  }

  @Test
  void evalAfterScriptFlush() {
    RateLimiter l = limiter(TestServer.Kind.REDIS62);
    String id = id();
    assertTrue(l.check(id, 5, 3600).allowed());
    assertEquals(Mode.EVAL, l.mode());
    new JedisSendCommand(clients.get(TestServer.Kind.REDIS62)).send(List.of("SCRIPT", "FLUSH"));
    assertEquals(2, l.check(id, 5, 3600).count(), "NOSCRIPT answered by EVAL");
  }

  @Test
  void libraryNotLoadedAndNotLoadableIsAConfigurationError() throws Exception {
    try (TestServer s = TestServer.start(TestServer.Kind.LIBRARY_ONLY);
        RedisClient admin = RedisClient.create("127.0.0.1", s.port)) {
      new JedisSendCommand(admin)
          .send(List.of("ACL", "SETUSER", "app", "on", ">secret", "~*", "+@all", "-function"));
      try (RedisClient app = RedisClient.create("127.0.0.1", s.port, "app", "secret")) {
        RateLimiter l = RateLimiter.builder(new JedisSendCommand(app)).build();
        LibraryNotLoadedException e =
            org.junit.jupiter.api.Assertions.assertThrows(
                LibraryNotLoadedException.class, () -> l.check(id(), 3, 60));
        assertTrue(e.getMessage().contains("FUNCTION LOAD"), e.getMessage());
        // Once an operator loads it, the same limiter works.
        new JedisSendCommand(admin).send(List.of("FUNCTION", "LOAD", "REPLACE", Library.code()));
        assertTrue(l.check(id(), 3, 60).allowed());
        assertEquals(Mode.FUNCTION, l.mode());
      }
    }
  }

  @Test
  void backendChoiceAndPrefix() {
    RedisClient module = clients.get(TestServer.Kind.MODULE);
    RateLimiter lib =
        RateLimiter.builder(new JedisSendCommand(module))
            .backend(Backend.LIBRARY)
            .prefix("jp:")
            .build();
    String id = id();
    assertTrue(lib.check(id, 2, 60).allowed());
    assertEquals(Mode.FUNCTION, lib.mode(), "LIBRARY never uses the module");
    assertEquals(
        1L, new JedisSendCommand(module).send(List.of("EXISTS", "jp:" + id)), "key = prefix + id");

    RateLimiter only =
        RateLimiter.builder(new JedisSendCommand(clients.get(TestServer.Kind.LIBRARY_ONLY)))
            .backend(Backend.MODULE)
            .build();
    RedisErrorReply e =
        org.junit.jupiter.api.Assertions.assertThrows(
            RedisErrorReply.class, () -> only.check(id(), 2, 60));
    assertTrue(e.getMessage().toLowerCase().contains("unknown command"), e.getMessage());
  }

  @Test
  void argumentErrorsAreThrown() {
    RateLimiter l = limiter(TestServer.Kind.MODULE);
    org.junit.jupiter.api.Assertions.assertThrows(
        IllegalArgumentException.class, () -> l.check(id(), 2, 60, CallOptions.defaults().cost(0)));
    org.junit.jupiter.api.Assertions.assertThrows(
        RateException.class, () -> l.checkLimits(id(), "10/second", CallOptions.defaults().ms()));
    org.junit.jupiter.api.Assertions.assertThrows(
        IllegalArgumentException.class,
        () -> l.checkLimits(id(), List.of(), CallOptions.defaults()));
    RedisErrorReply e =
        org.junit.jupiter.api.Assertions.assertThrows(
            RedisErrorReply.class, () -> l.check(id(), 2, 0));
    assertTrue(e.getMessage().startsWith("ERR"), "range errors are the server's: " + e);
  }

  @Test
  void circuitProbesOncePerIntervalAndCloses() throws Exception {
    int port = TestServer.freePort();
    List<List<String>> sent = java.util.Collections.synchronizedList(new java.util.ArrayList<>());
    java.util.concurrent.atomic.AtomicInteger outages =
        new java.util.concurrent.atomic.AtomicInteger();
    try (RedisClient client = RedisClient.create("127.0.0.1", port)) {
      JedisSendCommand jedis = new JedisSendCommand(client);
      SendCommand counting =
          cmd -> {
            sent.add(List.copyOf(cmd));
            return jedis.send(cmd);
          };
      RateLimiter l =
          RateLimiter.builder(counting)
              .probeInterval(java.time.Duration.ofMillis(300))
              .onError(e -> outages.incrementAndGet())
              .build();
      String id = id();
      assertTrue(l.check(id, 5, 3600).degraded(), "nothing listens yet");
      assertTrue(l.isDown());
      int afterFirst = sent.size();
      for (int i = 0; i < 20; i++) {
        assertTrue(l.check(id, 5, 3600).degraded());
      }
      assertEquals(afterFirst, sent.size(), "an open circuit does not ask Redis");
      try (TestServer s = TestServer.start(TestServer.Kind.MODULE, port)) {
        assertTrue(l.check(id, 5, 3600).degraded(), "no probe before the interval");
        Thread.sleep(350);
        // The call that finds a probe due is answered without Redis; the probe runs behind it.
        assertTrue(l.check(id, 5, 3600).degraded());
        long deadline = System.nanoTime() + 20_000_000_000L;
        while (l.isDown() && System.nanoTime() < deadline) {
          Thread.sleep(10);
        }
        assertFalse(l.isDown(), "the probe got an answer");
        List<List<String>> probes = sent.subList(afterFirst, sent.size());
        assertEquals(1, probes.size(), "one probe: " + probes);
        assertEquals("SLIDINGWINDOW.PEEK", probes.get(0).get(0), "a probe only looks");
        assertEquals(1, l.check(id, 5, 3600).count(), "the probe counted nothing");
      }
      assertEquals(1, outages.get(), "the hook heard the one failed call");
    }
  }

  @Test
  void waitForSleepsRetryAfterWithinTheTimeout() throws Exception {
    RateLimiter l = limiter(TestServer.Kind.MODULE);
    String id = id();
    CallOptions ms = CallOptions.defaults().ms();
    assertTrue(l.check(id, 1, 300, ms).allowed());
    LimitResult late = l.waitFor(id, 1, 300, java.time.Duration.ZERO, ms);
    assertFalse(late.allowed(), "out of time at once: the denial");
    long t0 = System.nanoTime();
    LimitResult r = l.waitFor(id, 1, 300, java.time.Duration.ofSeconds(5), ms);
    long waited = (System.nanoTime() - t0) / 1_000_000;
    assertTrue(r.allowed(), "allowed after retry_after: " + r);
    // The sliding estimate may free the slot sooner than a window: the wait is about the
    // denial's retry_after, never the timeout.
    assertTrue(late.retryAfter() > 0, "a wait was due: " + late);
    assertTrue(waited <= late.retryAfter() + 1000, "waited " + waited + " ms for " + late);
    LimitResult never = l.waitFor(id, 1, 300, java.time.Duration.ofSeconds(5), ms.cost(2));
    assertFalse(never.allowed());
    assertEquals(-1, never.retryAfter(), "never possible: returned at once");
  }

  @Test
  void outageIsDegradedFailOpenAndClosed() throws Exception {
    int port = TestServer.freePort();
    try (RedisClient dead = RedisClient.create("127.0.0.1", port)) {
      RateLimiter open = RateLimiter.builder(new JedisSendCommand(dead)).build();
      LimitResult r = open.check(id(), 3, 60);
      assertTrue(r.allowed());
      assertTrue(r.degraded());
      RateLimiter closed = RateLimiter.builder(new JedisSendCommand(dead)).failOpen(false).build();
      LimitResult c = closed.check(id(), 3, 60);
      assertFalse(c.allowed());
      assertTrue(c.degraded());
      assertTrue(Headers.rateLimitHeaders(c, "api").isEmpty());
    }
  }
}
