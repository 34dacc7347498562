package io.github.redisslidingwindow;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.redisslidingwindow.lettuce.LettuceSendCommand;
import io.github.redisslidingwindow.reactive.ReactiveRateLimiter;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import io.lettuce.core.api.StatefulRedisConnection;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * The limiter's {@code *Async} calls and {@link ReactiveRateLimiter} through Lettuce's async API on
 * the module, library-only and Redis 6.2 servers: the same answers as the blocking calls, 50 calls
 * in flight at once from one thread, the library found again after FUNCTION FLUSH, EVAL after
 * SCRIPT FLUSH, a closed connection degraded.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class LettuceAsyncTest {
  private final Map<TestServer.Kind, TestServer> servers = new EnumMap<>(TestServer.Kind.class);
  private final Map<TestServer.Kind, RedisClient> clients = new EnumMap<>(TestServer.Kind.class);
  private final Map<TestServer.Kind, StatefulRedisConnection<String, String>> connections =
      new EnumMap<>(TestServer.Kind.class);

  @BeforeAll
  void start() throws Exception {
    for (TestServer.Kind k : TestServer.Kind.values()) {
      TestServer s = TestServer.start(k);
      servers.put(k, s);
      RedisClient c = RedisClient.create(RedisURI.create("127.0.0.1", s.port));
      clients.put(k, c);
      connections.put(k, c.connect());
    }
  }

  @AfterAll
  void stop() throws Exception {
    for (StatefulRedisConnection<?, ?> c : connections.values()) {
      c.close();
    }
    for (RedisClient c : clients.values()) {
      c.shutdown();
    }
    for (TestServer s : servers.values()) {
      s.close();
    }
  }

  private static Mode mode(TestServer.Kind k) {
    return switch (k) {
      case MODULE -> Mode.MODULE;
      case LIBRARY_ONLY -> Mode.FUNCTION;
      case REDIS62 -> Mode.EVAL;
    };
  }

  private RateLimiter limiter(TestServer.Kind k) {
    return RateLimiter.builder(new LettuceSendCommand(connections.get(k))).build();
  }

  private static String id() {
    return "java-async:" + UUID.randomUUID();
  }

  @ParameterizedTest
  @EnumSource(TestServer.Kind.class)
  void checkPeekRefundCountsSeveralLimits(TestServer.Kind k) {
    RateLimiter l = limiter(k);
    assertTrue(l.isAsync());
    String id = id();
    for (int i = 1; i <= 3; i++) {
      LimitResult r = l.checkAsync(id, 3, 3600).join();
      assertTrue(r.allowed(), k + " check " + i);
      assertEquals(i, r.count());
      assertEquals(3 - i, r.remaining());
      assertFalse(r.degraded());
    }
    assertEquals(mode(k), l.mode());
    LimitResult denied = l.checkAsync(id, 3, 3600).join();
    assertFalse(denied.allowed());
    assertTrue(denied.retryAfter() > 0 && denied.retryAfter() <= 3600);
    CallOptions o = CallOptions.defaults();
    LimitResult refund = l.refundAsync(id, 3, 3600, o).join();
    assertTrue(refund.allowed());
    assertEquals(refund, l.peekAsync(id, 3, 3600, o).join());
    assertEquals(refund, l.peek(id, 3, 3600), "the blocking call agrees");
    assertEquals(2, l.countsAsync(id, 3600, o).join().current());

    String id2 = id();
    l.checkLimitsAsync(id2, "2/minute;100/hour", o).join();
    l.checkLimitsAsync(id2, "2/minute;100/hour", o).join();
    MultiLimitResult d = l.checkLimitsAsync(id2, "2/minute;100/hour", o).join();
    assertFalse(d.allowed());
    assertEquals(0, d.governing());
    assertTrue(d.limits().get(1).allowed());
    // two counted: a peek answers the estimate with this request
    assertEquals(3, l.peekLimitsAsync(id2, "100/hour", o).join().summary().count());
  }

  @ParameterizedTest
  @EnumSource(TestServer.Kind.class)
  void fiftyCallsInFlightAtOnceGetExactlyTheLimit(TestServer.Kind k) {
    RateLimiter l = limiter(k);
    String id = id();
    List<CompletableFuture<LimitResult>> all = new ArrayList<>();
    for (int i = 0; i < 50; i++) {
      all.add(l.checkAsync(id, 20, 3600));
    }
    long allowed = all.stream().map(CompletableFuture::join).filter(LimitResult::allowed).count();
    assertEquals(20, allowed, k + ": allowed of 50");
    assertEquals(20, l.peek(id, 20, 3600).count());
  }

  @Test
  void theLibraryIsFoundAgainAfterFunctionFlush() {
    RateLimiter l = limiter(TestServer.Kind.LIBRARY_ONLY);
    String id = id();
    assertTrue(l.checkAsync(id, 5, 3600).join().allowed());
    new LettuceSendCommand(connections.get(TestServer.Kind.LIBRARY_ONLY))
        .send(List.of("FUNCTION", "FLUSH"));
    List<CompletableFuture<LimitResult>> all = new ArrayList<>();
    for (int i = 0; i < 4; i++) {
      all.add(l.checkAsync(id, 5, 3600));
    }
    List<Long> counts = all.stream().map(f -> f.join().count()).sorted().toList();
    assertEquals(List.of(2L, 3L, 4L, 5L), counts, "loaded again, the key counts on");
    assertEquals(Mode.FUNCTION, l.mode());
  }

  @Test
  void evalAfterScriptFlushOnRedis62() {
    RateLimiter l = limiter(TestServer.Kind.REDIS62);
    String id = id();
    assertTrue(l.checkAsync(id, 5, 3600).join().allowed());
    new LettuceSendCommand(connections.get(TestServer.Kind.REDIS62))
        .send(List.of("SCRIPT", "FLUSH"));
    LimitResult r = l.checkAsync(id, 5, 3600).join();
    assertEquals(2, r.count(), "NOSCRIPT answered by EVAL");
    assertEquals(3, l.checkAsync(id, 5, 3600).join().count(), "EVAL loaded it again for EVALSHA");
  }

  @Test
  void anErrorReplyFailsTheFutureAndArgumentErrorsAreThrown() {
    RateLimiter l = limiter(TestServer.Kind.MODULE);
    CompletionException e =
        assertThrows(
            CompletionException.class,
            () -> l.checkAsync(id(), 5, 0).join(),
            "the server refuses a window of 0");
    assertInstanceOf(RedisErrorReply.class, e.getCause());
    assertThrows(
        IllegalArgumentException.class,
        () -> l.checkAsync(id(), 5, 60, CallOptions.defaults().cost(0)));
  }

  @Test
  void aClosedConnectionIsAnOutageAnsweredDegraded() {
    StatefulRedisConnection<String, String> c = clients.get(TestServer.Kind.MODULE).connect();
    RateLimiter l = RateLimiter.builder(new LettuceSendCommand(c)).failOpen(false).build();
    assertTrue(l.checkAsync(id(), 3, 3600).join().allowed());
    c.close();
    LimitResult r = l.checkAsync(id(), 3, 3600).join();
    assertTrue(r.degraded(), r.toString());
    assertFalse(r.allowed(), "fail-closed");
    assertTrue(l.isDown());
  }

  @Test
  void reactive() {
    ReactiveRateLimiter rl = new ReactiveRateLimiter(limiter(TestServer.Kind.LIBRARY_ONLY));
    String id = id();
    var twice = rl.check(id, 2, 3600).then(rl.check(id, 2, 3600));
    assertEquals(2, twice.block().count());
    assertFalse(rl.check(id, 2, 3600).block().allowed());
    MultiLimitResult m = rl.checkLimits(id(), "1/minute;5/hour", CallOptions.defaults()).block();
    assertTrue(m.allowed());
    assertEquals(2, m.limits().size());
    // an argument error is an error signal, at subscription
    var bad = rl.checkLimits(id, "ten per second", CallOptions.defaults());
    assertThrows(RateException.class, bad::block);
    assertEquals(2, rl.counts(id, 3600, CallOptions.defaults()).block().current());
  }
}
