package io.github.redisslidingwindow.boot;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.redisslidingwindow.LimitResult;
import io.github.redisslidingwindow.RateLimiter;
import io.github.redisslidingwindow.TestServer;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import io.lettuce.core.api.StatefulRedisConnection;
import java.util.UUID;
import org.junit.jupiter.api.Test;
import org.springframework.boot.SpringApplication;
import org.springframework.context.ConfigurableApplicationContext;

/**
 * slidingwindow.timeout on a frozen server (SIGSTOP): a call without a reply within it is an outage
 * answered at once, and the limiter answers again after the server is thawed (SIGCONT).
 */
class StarterTimeoutTest {
  private static long serverPid(int port) {
    RedisClient c = RedisClient.create(RedisURI.create("127.0.0.1", port));
    try (StatefulRedisConnection<String, String> conn = c.connect()) {
      String info = conn.sync().info("server");
      return Long.parseLong(info.replaceAll("(?s).*process_id:(\\d+).*", "$1"));
    } finally {
      c.shutdown();
    }
  }

  private static void signal(long pid, String sig) throws Exception {
    Process p = new ProcessBuilder("kill", "-" + sig, Long.toString(pid)).inheritIO().start();
    assertEquals(0, p.waitFor());
  }

  @Test
  void aFrozenServerIsAnOutageWithinTheTimeout() throws Exception {
    try (TestServer redis = TestServer.start(TestServer.Kind.MODULE)) {
      long pid = serverPid(redis.port);
      try (ConfigurableApplicationContext app =
          SpringApplication.run(
              StarterTestApp.class,
              "--spring.main.web-application-type=none",
              "--spring.main.banner-mode=off",
              "--spring.data.redis.url=redis://127.0.0.1:" + redis.port,
              "--slidingwindow.timeout=200ms",
              "--slidingwindow.probe-interval=100ms")) {
        RateLimiter l = app.getBean(RateLimiter.class);
        String id = "t-" + UUID.randomUUID();
        assertFalse(l.check(id, 5, 3600).degraded());
        signal(pid, "STOP");
        try {
          long start = System.nanoTime();
          LimitResult r = l.check(id, 5, 3600);
          long ms = (System.nanoTime() - start) / 1_000_000;
          assertTrue(r.degraded(), r.toString());
          assertTrue(r.allowed(), "fail-open");
          assertTrue(ms >= 150 && ms < 1500, "answered after the 200 ms timeout: " + ms + " ms");
          assertTrue(l.isDown());
          long start2 = System.nanoTime();
          assertTrue(l.check(id, 5, 3600).degraded());
          long ms2 = (System.nanoTime() - start2) / 1_000_000;
          assertTrue(ms2 < 150, "the circuit open: answered without Redis in " + ms2 + " ms");
        } finally {
          signal(pid, "CONT");
        }
        // thawed: the first probe after the interval gets an answer and closes the circuit
        LimitResult back = null;
        long deadline = System.nanoTime() + 5_000_000_000L;
        while (System.nanoTime() < deadline) {
          back = l.check(id, 5, 3600);
          if (!back.degraded()) {
            break;
          }
          Thread.sleep(50);
        }
        assertFalse(back.degraded(), "answers again after SIGCONT");
        assertFalse(l.isDown());
      }
    }
  }
}
