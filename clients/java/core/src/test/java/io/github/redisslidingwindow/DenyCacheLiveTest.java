package io.github.redisslidingwindow;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.redisslidingwindow.jedis.JedisSendCommand;
import io.github.redisslidingwindow.lettuce.LettuceSendCommand;
import io.lettuce.core.RedisURI;
import io.lettuce.core.api.StatefulRedisConnection;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import redis.clients.jedis.RedisClient;

/**
 * The deny cache on a module server, through Jedis (blocking), Lettuce's blocking calls and its
 * async path: the CHECKs Redis sees (INFO commandstats) for 20 requests on one refused identity
 * with and without the cache, the server clock read by TIME, many threads on one identity getting
 * exactly the limit, the single flight, the LRU bound and the waiters woken on eviction.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class DenyCacheLiveTest {
  enum Adapter {
    JEDIS,
    LETTUCE,
    LETTUCE_ASYNC
  }

  private TestServer server;
  private RedisClient jedis;
  private RedisClient admin;
  private io.lettuce.core.RedisClient lettuce;
  private StatefulRedisConnection<String, String> conn;

  @BeforeAll
  void start() throws Exception {
    server = TestServer.start(TestServer.Kind.MODULE);
    jedis = RedisClient.create("127.0.0.1", server.port);
    admin = RedisClient.create("127.0.0.1", server.port);
    lettuce = io.lettuce.core.RedisClient.create(RedisURI.create("127.0.0.1", server.port));
    conn = lettuce.connect();
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
    if (admin != null) {
      admin.close();
    }
    if (server != null) {
      server.close();
    }
  }

  private static String id() {
    return "java-deny:" + UUID.randomUUID();
  }

  private SendCommand sender(Adapter a) {
    return a == Adapter.JEDIS ? new JedisSendCommand(jedis) : new LettuceSendCommand(conn);
  }

  /** A check through the adapter's path: blocking, or the async call awaited. */
  private static LimitResult check(Adapter a, RateLimiter l, String id, long limit, long window) {
    return check(a, l, id, limit, window, CallOptions.defaults());
  }

  private static LimitResult check(
      Adapter a, RateLimiter l, String id, long limit, long window, CallOptions o) {
    return a == Adapter.LETTUCE_ASYNC
        ? l.checkAsync(id, limit, window, o).join()
        : l.check(id, limit, window, o);
  }

  /** {@code calls} of a command in INFO commandstats (cmdstat_slidingwindow.check, ...). */
  private long calls(String command) {
    String info =
        new String(
            (byte[])
                admin.sendCommand(() -> "INFO".getBytes(StandardCharsets.UTF_8), "commandstats"),
            StandardCharsets.UTF_8);
    String prefix = "cmdstat_" + command + ":calls=";
    for (String line : info.split("\r?\n")) {
      if (line.startsWith(prefix)) {
        return Long.parseLong(line.substring(prefix.length(), line.indexOf(',')));
      }
    }
    return 0;
  }

  private long checks() {
    return calls("slidingwindow.check");
  }

  @ParameterizedTest
  @EnumSource(Adapter.class)
  void twentyRequestsOnOneRefusedIdentityWithAndWithoutTheCache(Adapter a) {
    for (boolean cached : new boolean[] {true, false}) {
      RateLimiter l =
          RateLimiter.builder(sender(a)).denyCache(cached ? new DenyCache() : null).build();
      String id = id();
      long before = checks();
      long timeBefore = calls("time");
      int refused = 0;
      for (int i = 0; i < 20; i++) {
        LimitResult r = check(a, l, id, 2, 60);
        assertFalse(r.degraded());
        if (!r.allowed()) {
          refused++;
          assertTrue(r.retryAfter() >= 1 && r.retryAfter() <= 60, "retry_after " + r);
        }
      }
      String label = a + (cached ? " with the cache" : " without the cache");
      assertEquals(18, refused, label + ": refused of 20");
      assertEquals(cached ? 3 : 20, checks() - before, label + ": CHECKs Redis saw for 20");
      // A refusal in seconds on a single node measures the server clock once: three TIME samples.
      assertEquals(cached ? 3 : 0, calls("time") - timeBefore, label + ": TIME calls");
      if (cached) {
        DenyCache.Stats s = l.denyCache().stats();
        assertEquals(17, s.hits(), label + ": " + s);
        assertEquals(1, s.stored(), label + ": " + s);
        assertEquals(1, s.entries(), label + ": " + s);
      }
    }
  }

  @ParameterizedTest
  @EnumSource(Adapter.class)
  void fiftyThreadsOnOneIdentityGetExactlyTheLimitAndTheCacheAnswersTheRest(Adapter a)
      throws Exception {
    RateLimiter l = RateLimiter.builder(sender(a)).denyCache(new DenyCache()).build();
    String id = id();
    int threads = 50;
    int each = 10;
    int limit = 20;
    long before = checks();
    int allowed = 0;
    if (a == Adapter.LETTUCE_ASYNC) {
      // 10 waves of 50 calls in flight at once from this one thread
      for (int wave = 0; wave < each; wave++) {
        List<CompletableFuture<LimitResult>> fs = new ArrayList<>();
        for (int i = 0; i < threads; i++) {
          fs.add(l.checkAsync(id, limit, 3600, CallOptions.defaults()));
        }
        for (CompletableFuture<LimitResult> f : fs) {
          LimitResult r = f.get(60, TimeUnit.SECONDS);
          assertFalse(r.degraded());
          allowed += r.allowed() ? 1 : 0;
        }
      }
    } else {
      ExecutorService pool = Executors.newFixedThreadPool(threads);
      CountDownLatch go = new CountDownLatch(1);
      List<Future<Integer>> answers = new ArrayList<>();
      try {
        for (int t = 0; t < threads; t++) {
          answers.add(
              pool.submit(
                  () -> {
                    go.await();
                    int n = 0;
                    for (int i = 0; i < each; i++) {
                      LimitResult r = l.check(id, limit, 3600);
                      assertFalse(r.degraded());
                      n += r.allowed() ? 1 : 0;
                    }
                    return n;
                  }));
        }
        go.countDown();
        for (Future<Integer> f : answers) {
          allowed += f.get(60, TimeUnit.SECONDS);
        }
      } finally {
        pool.shutdownNow();
      }
    }
    long sent = checks() - before;
    DenyCache.Stats s = l.denyCache().stats();
    assertEquals(limit, allowed, a + ": allowed of " + threads * each);
    assertEquals(limit, l.peek(id, limit, 3600).count(), "Redis counted exactly the limit");
    assertEquals(threads * each, sent + s.hits(), a + ": each call sent or a hit: " + s);
    // Before the first refusal is stored the calls race to Redis; after it the cache answers.
    assertTrue(sent <= limit + threads, a + ": " + sent + " CHECKs for " + threads * each);
    assertTrue(s.hits() >= threads * each - limit - threads, a + ": " + s);
  }

  /** A sender that holds the first CHECK after {@link #arm} until {@link #release}. */
  static class Gated implements SendCommand {
    final SendCommand inner;
    final AtomicBoolean armed = new AtomicBoolean();
    final CountDownLatch held = new CountDownLatch(1);
    volatile CountDownLatch release = new CountDownLatch(0);

    Gated(SendCommand inner) {
      this.inner = inner;
    }

    void arm() {
      release = new CountDownLatch(1);
      armed.set(true);
    }

    boolean holds(List<String> cmd) {
      return cmd.get(0).equalsIgnoreCase("SLIDINGWINDOW.CHECK") && armed.compareAndSet(true, false);
    }

    @Override
    public Object send(List<String> cmd) {
      if (holds(cmd)) {
        held.countDown();
        try {
          release.await(30, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
      }
      return inner.send(cmd);
    }
  }

  /** The same, without blocking: the held CHECK's future is sent on release. */
  static final class GatedAsync extends Gated implements AsyncSendCommand {
    GatedAsync(LettuceSendCommand inner) {
      super(inner);
    }

    @Override
    public CompletableFuture<Object> sendAsync(List<String> cmd) {
      AsyncSendCommand a = (AsyncSendCommand) inner;
      if (holds(cmd)) {
        held.countDown();
        CountDownLatch r = release;
        return CompletableFuture.runAsync(
                () -> {
                  try {
                    r.await(30, TimeUnit.SECONDS);
                  } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                  }
                })
            .thenCompose(v -> a.sendAsync(cmd));
      }
      return a.sendAsync(cmd);
    }
  }

  /** Checks (1 per w ms) until refused: the refusal is then cached. */
  private static LimitResult refuse(Adapter a, RateLimiter l, String id, long w) {
    for (int i = 0; i < 3; i++) {
      LimitResult r = check(a, l, id, 1, w, CallOptions.defaults().ms());
      assertFalse(r.degraded());
      if (!r.allowed()) {
        return r;
      }
    }
    throw new AssertionError("never refused");
  }

  private Gated gated(Adapter a) {
    return a == Adapter.LETTUCE_ASYNC
        ? new GatedAsync(new LettuceSendCommand(conn))
        : new Gated(sender(a));
  }

  private static void await(java.util.function.BooleanSupplier cond, String what)
      throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (!cond.getAsBoolean()) {
      if (System.nanoTime() > deadline) {
        throw new AssertionError("timed out waiting: " + what);
      }
      Thread.sleep(2);
    }
  }

  /**
   * Once a refusal's entry has ended, 20 concurrent calls on the key send one call (the flight) and
   * wait for it: it is allowed, the next one leads again and is refused, and that refusal answers
   * the other 18.
   */
  @ParameterizedTest
  @EnumSource(Adapter.class)
  void concurrentCallsOnAnEndedRefusalShareOneCall(Adapter a) throws Exception {
    Gated g = gated(a);
    RateLimiter l = RateLimiter.builder(g).denyCache(new DenyCache(100, Duration.ZERO)).build();
    String id = id();
    CallOptions ms = CallOptions.defaults().ms();
    long w = 1000;
    // Early in a window (the server's clock is this machine's): the refusal lasts most of it.
    Thread.sleep(w + 20 - System.currentTimeMillis() % w);
    refuse(a, l, id, w);
    assertEquals(1, l.denyCache().stats().stored());
    // Early in the window after the next: Redis allows again (nothing counted in the previous
    // window), the entry has ended, and the next refusal will last most of this window.
    Thread.sleep(2 * w + 20 - System.currentTimeMillis() % w);
    g.arm();
    long before = checks();
    int n = 20;
    List<CompletableFuture<LimitResult>> fs = new ArrayList<>();
    ExecutorService pool = Executors.newFixedThreadPool(n);
    try {
      for (int i = 0; i < n; i++) {
        if (a == Adapter.LETTUCE_ASYNC) {
          fs.add(l.checkAsync(id, 1, w, ms));
        } else {
          fs.add(CompletableFuture.supplyAsync(() -> l.check(id, 1, w, ms), pool));
        }
      }
      assertTrue(g.held.await(10, TimeUnit.SECONDS), "the lead's CHECK was sent");
      await(() -> l.denyCache().stats().waits() == n - 1, "the other calls wait for the flight");
      assertEquals(0, checks() - before, "the lead's call is held: nothing sent yet");
      g.release.countDown();
      int allowed = 0;
      List<LimitResult> rs = new ArrayList<>();
      for (CompletableFuture<LimitResult> f : fs) {
        LimitResult r = f.get(30, TimeUnit.SECONDS);
        rs.add(r);
        assertFalse(r.degraded());
        allowed += r.allowed() ? 1 : 0;
      }
      assertEquals(
          1,
          allowed,
          a
              + ": allowed of "
              + n
              + " "
              + rs
              + " "
              + l.denyCache().stats()
              + " "
              + (checks() - before));
      assertEquals(2, checks() - before, a + ": CHECKs for " + n + " " + l.denyCache().stats());
    } finally {
      g.release.countDown();
      pool.shutdownNow();
    }
  }

  /**
   * 20 concurrent first calls on a fresh key (limit 10) send one call and wait for it; its allowed
   * answer leaves 9, so 9 of the waiters go to Redis at once, one more leads the next flight and is
   * refused, and that refusal answers the other 9: 11 CHECKs (more when the woken calls run late),
   * exactly 10 allowed.
   */
  @ParameterizedTest
  @EnumSource(Adapter.class)
  void concurrentFirstCallsShareOneCallAndTheQuotaLeftGoesAtOnce(Adapter a) throws Exception {
    Gated g = gated(a);
    RateLimiter l = RateLimiter.builder(g).denyCache(new DenyCache(100, Duration.ZERO)).build();
    String id = id();
    int n = 20;
    g.arm();
    long before = checks();
    List<CompletableFuture<LimitResult>> fs = new ArrayList<>();
    ExecutorService pool = Executors.newFixedThreadPool(n);
    try {
      for (int i = 0; i < n; i++) {
        fs.add(
            a == Adapter.LETTUCE_ASYNC
                ? l.checkAsync(id, 10, 3600, CallOptions.defaults())
                : CompletableFuture.supplyAsync(() -> l.check(id, 10, 3600), pool));
      }
      assertTrue(g.held.await(10, TimeUnit.SECONDS), "the lead's CHECK was sent");
      await(() -> l.denyCache().stats().waits() == n - 1, "the other calls wait for the flight");
      assertEquals(0, checks() - before, "the lead's call is held: nothing sent yet");
      g.release.countDown();
      int allowed = 0;
      for (CompletableFuture<LimitResult> f : fs) {
        LimitResult r = f.get(30, TimeUnit.SECONDS);
        assertFalse(r.degraded());
        allowed += r.allowed() ? 1 : 0;
      }
      assertEquals(10, allowed, a + ": allowed of " + n);
      // 11 when the woken calls run at once; a call woken late may lead a flight of its own
      // after the previous one ended allowed (its quota taken by calls still on their way).
      long sent = checks() - before;
      DenyCache.Stats st = l.denyCache().stats();
      assertTrue(sent >= 11 && sent <= n, a + ": " + sent + " CHECKs, " + st);
      assertEquals(n, sent + st.hits(), a + ": each call sent or a hit, " + st);
      System.out.println(a + ": 20 concurrent first calls sent " + sent + " CHECKs, " + st);
    } finally {
      g.release.countDown();
      pool.shutdownNow();
    }
  }

  /** The cache holds at most maxEntries keys and lets the least recently used go first. */
  @Test
  void boundedLeastRecentlyUsedFirst() {
    DenyCache cache = new DenyCache(3, Duration.ZERO);
    RateLimiter l = RateLimiter.builder(sender(Adapter.JEDIS)).denyCache(cache).build();
    String p = id() + ":";
    java.util.function.Consumer<String> refuse =
        k -> {
          assertTrue(l.check(p + k, 1, 600).allowed());
          assertFalse(l.check(p + k, 1, 600).allowed());
        };
    java.util.function.Predicate<String> hit =
        k -> {
          long before = cache.stats().hits();
          assertFalse(l.check(p + k, 1, 600).allowed());
          return cache.stats().hits() == before + 1;
        };
    for (String k : List.of("a", "b", "c")) {
      refuse.accept(k);
    }
    assertEquals(3, cache.stats().entries());
    assertEquals(0, cache.stats().evicted());
    assertTrue(hit.test("a"), "a answered from the cache: now the most recent, b the least");
    refuse.accept("d");
    assertEquals(3, cache.stats().entries(), "a fourth key: still 3 held");
    assertEquals(1, cache.stats().evicted());
    for (String k : List.of("a", "c", "d")) {
      assertTrue(hit.test(k), k + " was kept");
    }
    assertFalse(hit.test("b"), "b, the least recently used, was dropped");
  }

  /**
   * Calls waiting for a key's flight are woken when the key is evicted and ask Redis at once (not
   * after the flight's 5 s wait), while the lead's call is still held.
   */
  @ParameterizedTest
  @EnumSource(Adapter.class)
  void evictionWakesTheWaiters(Adapter a) throws Exception {
    Gated g = gated(a);
    DenyCache cache = new DenyCache(1, Duration.ZERO);
    RateLimiter l = RateLimiter.builder(g).denyCache(cache).build();
    String ka = id();
    String kb = id();
    CallOptions ms = CallOptions.defaults().ms();
    LimitResult refused = refuse(a, l, ka, 200);
    Thread.sleep(refused.retryAfter() + 20); // the entry ends: the next call leads a flight
    g.arm();
    ExecutorService pool = Executors.newFixedThreadPool(2);
    try {
      CompletableFuture<LimitResult> lead =
          a == Adapter.LETTUCE_ASYNC
              ? l.checkAsync(ka, 1, 200, ms)
              : CompletableFuture.supplyAsync(() -> l.check(ka, 1, 200, ms), pool);
      assertTrue(g.held.await(10, TimeUnit.SECONDS));
      long start = System.nanoTime();
      CompletableFuture<LimitResult> waiter =
          a == Adapter.LETTUCE_ASYNC
              ? l.checkAsync(ka, 1, 200, ms)
              : CompletableFuture.supplyAsync(() -> l.check(ka, 1, 200, ms), pool);
      await(() -> cache.stats().waits() == 1, "the second call waits");
      refuse(a, l, kb, 60_000); // b's refusal evicts a
      LimitResult w = waiter.get(2, TimeUnit.SECONDS);
      long tookMs = (System.nanoTime() - start) / 1_000_000;
      assertFalse(w.degraded());
      assertEquals(1, cache.stats().evicted());
      assertFalse(lead.isDone(), "the lead is still held: the waiter went to Redis itself");
      assertTrue(tookMs < 2000, "woken in " + tookMs + " ms");
      g.release.countDown();
      assertFalse(lead.get(10, TimeUnit.SECONDS).degraded());
    } finally {
      g.release.countDown();
      pool.shutdownNow();
    }
  }

  /**
   * 32 threads on 16 identities through a cache of 4 keys (so it evicts all along): each identity
   * gets exactly its limit, and the cache answers refusals.
   */
  @Test
  void manyThreadsManyIdentitiesSmallCache() throws Exception {
    DenyCache cache = new DenyCache(4, Duration.ofSeconds(10));
    RateLimiter l = RateLimiter.builder(sender(Adapter.JEDIS)).denyCache(cache).build();
    String p = id() + ":";
    int ids = 16;
    int limit = 5;
    Map<Integer, AtomicInteger> allowed = new ConcurrentHashMap<>();
    AtomicLong calls = new AtomicLong();
    ExecutorService pool = Executors.newFixedThreadPool(32);
    List<Future<?>> fs = new ArrayList<>();
    try {
      for (int g = 0; g < 32; g++) {
        int gg = g;
        fs.add(
            pool.submit(
                () -> {
                  for (int i = 0; i < 40; i++) {
                    int k = (gg * 7 + i) % ids;
                    LimitResult r = l.check(p + k, limit, 600);
                    assertFalse(r.degraded());
                    calls.incrementAndGet();
                    if (r.allowed()) {
                      allowed.computeIfAbsent(k, x -> new AtomicInteger()).incrementAndGet();
                    }
                  }
                }));
      }
      for (Future<?> f : fs) {
        f.get(60, TimeUnit.SECONDS);
      }
    } finally {
      pool.shutdownNow();
    }
    for (int k = 0; k < ids; k++) {
      assertEquals(limit, allowed.get(k).get(), "identity " + k);
    }
    DenyCache.Stats s = cache.stats();
    assertTrue(s.hits() > 0 && s.evicted() > 0 && s.entries() <= 4, s.toString());
  }
}
