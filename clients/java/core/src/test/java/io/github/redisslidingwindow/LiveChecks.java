package io.github.redisslidingwindow;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

/**
 * The live checks every adapter's test runs on a limiter of its own (Jedis, Lettuce, a cluster):
 * one body each, so the adapters are held to the same answers.
 */
final class LiveChecks {
  private LiveChecks() {}

  // Hour-long windows: a window boundary inside a test (the previous window's weight
  // starting to fall) is unlikely to land in the few milliseconds it runs.
  static void checkPeekRefundCounts(RateLimiter l, String id, Mode expected, String label) {
    for (int i = 1; i <= 3; i++) {
      LimitResult r = l.check(id, 3, 3600);
      assertTrue(r.allowed(), label + " check " + i);
      assertEquals(i, r.count());
      assertEquals(3 - i, r.remaining());
      assertEquals(-1, r.retryAfter());
      assertFalse(r.degraded());
    }
    assertEquals(expected, l.mode(), label + ": backend");
    LimitResult denied = l.check(id, 3, 3600);
    assertFalse(denied.allowed());
    assertEquals(3, denied.count());
    assertTrue(denied.retryAfter() > 0 && denied.retryAfter() <= 3600, "retry " + denied);
    assertTrue(denied.retryAfterSeconds().isPresent());

    LimitResult peek = l.peek(id, 3, 3600);
    assertFalse(peek.allowed());
    assertEquals(3, peek.count());

    // The reply of a refund is what PEEK answers right after it: the estimate with this
    // request, allowed again.
    LimitResult refund = l.refund(id, 3, 3600);
    assertTrue(refund.allowed());
    assertEquals(3, refund.count());
    assertEquals(0, refund.remaining());
    assertEquals(refund, l.peek(id, 3, 3600));
    assertEquals(refund, l.peek(id, 3, 3600), "peek counts nothing");

    WindowCounts c = l.counts(id, 3600, CallOptions.defaults());
    assertEquals(2, c.current());
    assertFalse(c.degraded());

    l.reset(id);
    assertEquals(0, l.counts(id, 3600, CallOptions.defaults()).current());
    assertEquals(1, l.peek(id, 3, 3600).count());
  }

  static void severalLimits(RateLimiter l, String id) {
    MultiLimitResult a = l.checkLimits(id, "2/minute;100/hour", CallOptions.defaults());
    assertTrue(a.allowed());
    assertTrue(a.ms());
    assertEquals(2, a.limits().size());
    assertEquals(0, a.governing(), "fewest remaining: the 2/minute limit");
    l.checkLimits(id, "2/minute;100/hour", CallOptions.defaults());
    MultiLimitResult d = l.checkLimits(id, "2/minute;100/hour", CallOptions.defaults());
    assertFalse(d.allowed());
    assertEquals(0, d.governing());
    assertFalse(d.limits().get(0).allowed());
    assertTrue(d.limits().get(1).allowed(), "the hour limit alone would allow");
    assertTrue(d.retryAfter() > 0 && d.retryAfter() <= 60_000, "ms: " + d.retryAfter());
    assertEquals(2, d.limits().get(1).count(), "a denied call counts nothing");
  }

  /** 50 threads, released together, check one identity: exactly the limit is allowed. */
  static void fiftyThreadsGetExactlyTheLimit(RateLimiter l, String id, String label)
      throws Exception {
    int threads = 50;
    int limit = 20;
    ExecutorService pool = Executors.newFixedThreadPool(threads);
    CountDownLatch go = new CountDownLatch(1);
    List<Future<Boolean>> answers = new ArrayList<>();
    try {
      for (int i = 0; i < threads; i++) {
        answers.add(
            pool.submit(
                () -> {
                  go.await();
                  return l.check(id, limit, 3600).allowed();
                }));
      }
      go.countDown();
      int allowed = 0;
      for (Future<Boolean> f : answers) {
        if (f.get(60, TimeUnit.SECONDS)) {
          allowed++;
        }
      }
      assertEquals(limit, allowed, label + ": allowed of " + threads);
      assertEquals(limit, l.peek(id, limit, 3600).count());
    } finally {
      pool.shutdownNow();
    }
  }
}
