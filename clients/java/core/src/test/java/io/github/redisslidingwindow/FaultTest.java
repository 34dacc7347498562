package io.github.redisslidingwindow;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.redisslidingwindow.jedis.JedisSendCommand;
import io.github.redisslidingwindow.lettuce.LettuceSendCommand;
import io.lettuce.core.ClientOptions;
import io.lettuce.core.RedisURI;
import io.lettuce.core.TimeoutOptions;
import io.lettuce.core.api.StatefulRedisConnection;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.function.Supplier;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.RedisClient;

/**
 * The single-node fault cases through each adapter (Jedis, Lettuce's blocking calls, Lettuce's
 * async path), each on a server of its own with a 300 ms client timeout: FUNCTION FLUSH (the
 * library loaded again), SCRIPT FLUSH on Redis 6.2 (EVALSHA answered by EVAL), a restart without
 * the library (answered degraded, then the library loaded again), the server stopped (degraded at
 * once, fail-open and fail-closed, the circuit open) and frozen by SIGSTOP (answered degraded
 * within the timeout, then without waiting; answers again after SIGCONT).
 */
class FaultTest {
  enum Adapter {
    JEDIS,
    LETTUCE,
    LETTUCE_ASYNC
  }

  private static final int TIMEOUT_MS = 300;
  private final List<AutoCloseable> open = new ArrayList<>();

  @AfterEach
  void closeAll() throws Exception {
    for (int i = open.size() - 1; i >= 0; i--) {
      open.get(i).close();
    }
    open.clear();
  }

  private TestServer server(TestServer.Kind k) throws Exception {
    TestServer s = TestServer.start(k);
    open.add(s);
    return s;
  }

  private SendCommand sender(Adapter a, int port) {
    if (a == Adapter.JEDIS) {
      RedisClient c =
          RedisClient.builder()
              .hostAndPort("127.0.0.1", port)
              .clientConfig(
                  DefaultJedisClientConfig.builder()
                      .socketTimeoutMillis(TIMEOUT_MS)
                      .connectionTimeoutMillis(TIMEOUT_MS)
                      .build())
              .build();
      open.add(c);
      return new JedisSendCommand(c);
    }
    io.lettuce.core.RedisClient c =
        io.lettuce.core.RedisClient.create(
            RedisURI.builder()
                .withHost("127.0.0.1")
                .withPort(port)
                // The handshake's (a loaded machine can take over 300 ms to answer HELLO);
                // each command has TIMEOUT_MS through the TimeoutOptions below.
                .withTimeout(Duration.ofSeconds(5))
                .build());
    c.setOptions(
        ClientOptions.builder()
            .timeoutOptions(TimeoutOptions.enabled(Duration.ofMillis(TIMEOUT_MS)))
            .build());
    StatefulRedisConnection<String, String> conn = c.connect();
    open.add(c::shutdown);
    open.add(conn);
    return new LettuceSendCommand(conn);
  }

  private RateLimiter limiter(Adapter a, int port, boolean failOpen) {
    return RateLimiter.builder(sender(a, port))
        .failOpen(failOpen)
        .probeInterval(Duration.ofMillis(50))
        .build();
  }

  private static LimitResult check(Adapter a, RateLimiter l, String id) {
    return a == Adapter.LETTUCE_ASYNC ? l.checkAsync(id, 5, 3600).join() : l.check(id, 5, 3600);
  }

  private static String id() {
    return "java-fault:" + UUID.randomUUID();
  }

  private static long timed(Supplier<?> call) {
    long t = System.nanoTime();
    call.get();
    return (System.nanoTime() - t) / 1_000_000;
  }

  /** Calls until one is answered by Redis (the circuit's probe gets through), within 10 s. */
  private static LimitResult untilAnswered(Adapter a, RateLimiter l, String id) throws Exception {
    long deadline = System.nanoTime() + 10_000_000_000L;
    while (System.nanoTime() < deadline) {
      LimitResult r = check(a, l, id);
      if (!r.degraded()) {
        return r;
      }
      Thread.sleep(20);
    }
    throw new AssertionError("no answer from Redis within 10 s");
  }

  @ParameterizedTest
  @EnumSource(Adapter.class)
  void functionFlushLoadsTheLibraryAgain(Adapter a) throws Exception {
    TestServer s = server(TestServer.Kind.LIBRARY_ONLY);
    RateLimiter l = limiter(a, s.port, true);
    String id = id();
    assertEquals(1, check(a, l, id).count());
    assertEquals(Mode.FUNCTION, l.mode());
    sender(Adapter.JEDIS, s.port).send(List.of("FUNCTION", "FLUSH"));
    LimitResult r = check(a, l, id);
    assertFalse(r.degraded());
    assertEquals(2, r.count(), a + ": the key survived; the library was loaded again");
    assertEquals(Mode.FUNCTION, l.mode());
  }

  @ParameterizedTest
  @EnumSource(Adapter.class)
  void scriptFlushOnRedis62IsAnsweredByEval(Adapter a) throws Exception {
    TestServer s = server(TestServer.Kind.REDIS62);
    RateLimiter l = limiter(a, s.port, true);
    String id = id();
    assertEquals(1, check(a, l, id).count());
    assertEquals(Mode.EVAL, l.mode());
    long evalsBefore = s.calls("eval");
    sender(Adapter.JEDIS, s.port).send(List.of("SCRIPT", "FLUSH"));
    LimitResult r = check(a, l, id);
    assertFalse(r.degraded());
    assertEquals(2, r.count(), a + ": NOSCRIPT answered by EVAL");
    assertEquals(1, s.calls("eval") - evalsBefore, "one EVAL after the flush");
    assertEquals(3, check(a, l, id).count(), "then EVALSHA again (the script is cached)");
    assertEquals(1, s.calls("eval") - evalsBefore);
  }

  @ParameterizedTest
  @EnumSource(Adapter.class)
  void restartWithoutTheLibrary(Adapter a) throws Exception {
    TestServer s = TestServer.start(TestServer.Kind.LIBRARY_ONLY);
    int port = s.port;
    RateLimiter l;
    try {
      l = limiter(a, port, true);
      assertEquals(1, check(a, l, id()).count());
      assertEquals(Mode.FUNCTION, l.mode());
    } finally {
      s.close();
    }
    // the same port, a new server: no keys, no library
    TestServer again = TestServer.start(TestServer.Kind.LIBRARY_ONLY, port);
    open.add(again);
    assertEquals(0, again.calls("function|load"));
    String id = id();
    LimitResult r = untilAnswered(a, l, id);
    assertEquals(1, r.count(), a + ": counted on the new server");
    assertEquals(Mode.FUNCTION, l.mode());
    assertEquals(1, again.calls("function|load"), a + ": the library loaded on the new server");
    assertFalse(l.isDown());
    assertEquals(2, check(a, l, id).count());
  }

  @ParameterizedTest
  @EnumSource(Adapter.class)
  void serverStoppedIsAnsweredDegraded(Adapter a) throws Exception {
    TestServer s = TestServer.start(TestServer.Kind.MODULE);
    try {
      RateLimiter open = limiter(a, s.port, true);
      RateLimiter closed = limiter(a, s.port, false);
      assertFalse(check(a, open, id()).degraded());
      assertFalse(check(a, closed, id()).degraded());
      s.close();
      for (RateLimiter l : List.of(open, closed)) {
        boolean failOpen = l == open;
        long[] took = new long[3];
        for (int i = 0; i < took.length; i++) {
          LimitResult[] r = {null};
          took[i] = timed(() -> r[0] = check(a, l, id()));
          assertTrue(r[0].degraded(), a + ", call " + i + ": " + r[0]);
          assertEquals(failOpen, r[0].allowed(), a + " fail-open " + failOpen);
          assertTrue(took[i] < TIMEOUT_MS + 700, a + ", call " + i + " took " + took[i] + " ms");
        }
        assertTrue(l.isDown(), a + ": the circuit is open");
      }
    } finally {
      s.close();
    }
  }

  @ParameterizedTest
  @EnumSource(Adapter.class)
  void frozenServerIsAnsweredWithinTheTimeout(Adapter a) throws Exception {
    TestServer s = server(TestServer.Kind.MODULE);
    RateLimiter l = limiter(a, s.port, true);
    String id = id();
    assertEquals(1, check(a, l, id).count());
    s.signal("STOP");
    try {
      LimitResult[] r = {null};
      long first = timed(() -> r[0] = check(a, l, id));
      assertTrue(r[0].degraded() && r[0].allowed(), a + ": " + r[0]);
      assertTrue(
          first >= TIMEOUT_MS - 50 && first < TIMEOUT_MS + 700,
          a
              + ": the first call took "
              + first
              + " ms, want about the "
              + TIMEOUT_MS
              + " ms timeout");
      assertTrue(l.isDown());
      long second = timed(() -> r[0] = check(a, l, id));
      assertTrue(r[0].degraded(), a + ": " + r[0]);
      assertTrue(second < TIMEOUT_MS + 700, a + ": the second call took " + second + " ms");
    } finally {
      s.signal("CONT");
    }
    LimitResult back = untilAnswered(a, l, id);
    assertTrue(back.count() >= 2, a + ": " + back);
    assertFalse(l.isDown());
  }

  /**
   * The limiter's own timeout on Lettuce at its defaults (a 60 s command timeout): a frozen server
   * is answered degraded at the limiter's timeout, blocking and async calls alike.
   */
  @ParameterizedTest
  @EnumSource(
      value = Adapter.class,
      names = {"LETTUCE", "LETTUCE_ASYNC"})
  void limiterTimeoutOnLettuceAtItsDefaults(Adapter a) throws Exception {
    TestServer s = server(TestServer.Kind.MODULE);
    io.lettuce.core.RedisClient c =
        io.lettuce.core.RedisClient.create("redis://127.0.0.1:" + s.port);
    StatefulRedisConnection<String, String> conn = c.connect();
    open.add(c::shutdown);
    open.add(conn);
    RateLimiter l =
        RateLimiter.builder(new LettuceSendCommand(conn))
            .timeout(Duration.ofMillis(TIMEOUT_MS))
            .probeInterval(Duration.ofMillis(50))
            .build();
    String id = id();
    assertEquals(1, check(a, l, id).count());
    s.signal("STOP");
    try {
      LimitResult[] r = {null};
      long first = timed(() -> r[0] = check(a, l, id));
      assertTrue(r[0].degraded() && r[0].allowed(), a + ": " + r[0]);
      assertTrue(
          first >= TIMEOUT_MS - 50 && first < TIMEOUT_MS + 700,
          a + ": the first call took " + first + " ms, want about " + TIMEOUT_MS + " ms");
      assertTrue(l.isDown());
    } finally {
      s.signal("CONT");
    }
    assertTrue(untilAnswered(a, l, id).count() >= 2);
  }
}
