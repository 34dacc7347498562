package io.github.redisslidingwindow.bench;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.redisslidingwindow.TestServer;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.springframework.http.HttpHeaders;

/**
 * Each variant as the bench harness runs it: its own JVM started with {@code <variant> <redis
 * host:port> <limit> <window>}, its first stdout line {@code PORT n}, then GET / with X-Id over
 * real HTTP, counted on a real module server started here; the process is killed at the end.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class BenchApplicationTest {
  private TestServer redis;
  private final HttpClient http =
      HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();

  @BeforeAll
  void start() throws Exception {
    redis = TestServer.start(TestServer.Kind.MODULE);
  }

  @AfterAll
  void stop() throws Exception {
    if (redis != null) {
      redis.close();
    }
  }

  /** The app in a child JVM, as `java -jar` would run it (the test class path instead). */
  private record App(Process process, int port) implements AutoCloseable {
    @Override
    public void close() throws Exception {
      process.destroyForcibly();
      process.waitFor(30, TimeUnit.SECONDS);
    }
  }

  private App startApp(String variant, long limit, long window, String... extra) throws Exception {
    Path java = Path.of(System.getProperty("java.home"), "bin", "java");
    List<String> cmd =
        new java.util.ArrayList<>(
            List.of(
                java.toString(),
                "-Xmx256m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                "-cp",
                System.getProperty("java.class.path"),
                BenchApplication.class.getName(),
                variant,
                "127.0.0.1:" + redis.port,
                Long.toString(limit),
                Long.toString(window)));
    cmd.addAll(List.of(extra));
    Process p = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.INHERIT).start();
    BufferedReader out =
        new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
    String line = out.readLine();
    if (line == null || !line.startsWith("PORT ")) {
      p.destroyForcibly();
      throw new AssertionError(variant + ": first stdout line " + line);
    }
    return new App(p, Integer.parseInt(line.substring(5).trim()));
  }

  private HttpResponse<String> get(int port, String path, String id) throws Exception {
    HttpRequest.Builder b =
        HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path))
            .timeout(Duration.ofSeconds(10));
    if (id != null) {
      b.header("X-Id", id);
    }
    return http.send(b.build(), HttpResponse.BodyHandlers.ofString());
  }

  /** 3 per 60 s: 3 x 200 from the upstream, then 429 with a whole Retry-After, per identity. */
  private void threeThen429(String variant, long maxRetry) throws Exception {
    try (App app = startApp(variant, 3, 60)) {
      String id = "id-" + UUID.randomUUID();
      for (int i = 1; i <= 3; i++) {
        HttpResponse<String> r = get(app.port(), "/", id);
        assertEquals(200, r.statusCode(), variant + " request " + i);
        assertEquals("ok", r.body(), variant + ": the upstream's body");
      }
      for (int i = 4; i <= 5; i++) {
        HttpResponse<String> r = get(app.port(), "/", id);
        assertEquals(429, r.statusCode(), variant + " request " + i);
        long retry = Long.parseLong(r.headers().firstValue(HttpHeaders.RETRY_AFTER).orElseThrow());
        assertTrue(retry >= 1 && retry <= maxRetry, variant + ": Retry-After " + retry);
      }
      assertEquals(200, get(app.port(), "/", "other-" + id).statusCode(), "another identity");
    }
  }

  @Test
  void slidingwindow() throws Exception {
    threeThen429("slidingwindow", 60); // until the current 60 s window ends
  }

  @Test
  void redisRateLimiter() throws Exception {
    threeThen429("redis", 20); // one request's 20 tokens at 1 per second
  }

  @Test
  void bucket4j() throws Exception {
    threeThen429("bucket4j", 20); // one token at 3 per 60 s
  }

  @Test
  void noneAlwaysAllows() throws Exception {
    try (App app = startApp("none", 3, 60)) {
      String id = "id-" + UUID.randomUUID();
      for (int i = 1; i <= 10; i++) {
        HttpResponse<String> r = get(app.port(), "/", id);
        assertEquals(200, r.statusCode(), "none request " + i);
        assertEquals("ok", r.body());
        assertFalse(r.headers().firstValue(HttpHeaders.RETRY_AFTER).isPresent());
      }
    }
  }

  /** With log: /__decisions lists each decision in the Go apps' format. */
  @Test
  void decisionLog() throws Exception {
    try (App app = startApp("slidingwindow", 1, 60, "log")) {
      String id = "id-" + UUID.randomUUID();
      assertEquals(200, get(app.port(), "/", id).statusCode());
      HttpResponse<String> refused = get(app.port(), "/", id);
      assertEquals(429, refused.statusCode());
      String retry = refused.headers().firstValue(HttpHeaders.RETRY_AFTER).orElseThrow();
      String log = get(app.port(), "/__decisions", null).body();
      assertTrue(
          log.matches(
              "\\[\\{\"t\":\\d+,\"a\":true,\"r\":-1},\\{\"t\":\\d+,\"a\":false,\"r\":"
                  + retry
                  + "}]\\s*"),
          log);
    }
  }

  @Test
  void redisRateLimiterMapping() {
    assertArrayEquals(new int[] {1, 60, 20}, BenchApplication.redisRateLimiterArgs(3, 60));
    assertArrayEquals(new int[] {100, 100, 1}, BenchApplication.redisRateLimiterArgs(100, 1));
    assertArrayEquals(new int[] {50, 3000, 3}, BenchApplication.redisRateLimiterArgs(1000, 60));
    assertArrayEquals(new int[] {1, 7, 7}, BenchApplication.redisRateLimiterArgs(1, 7));
    assertThrows(
        IllegalArgumentException.class,
        () -> BenchApplication.redisRateLimiterArgs(1_000_003, 1_000_000_007L));
  }

  @Test
  void redisRetryAfterFromItsHeaders() {
    HttpHeaders h = new HttpHeaders();
    h.set("X-RateLimit-Remaining", "5");
    h.set("X-RateLimit-Requested-Tokens", "20");
    h.set("X-RateLimit-Replenish-Rate", "2");
    assertEquals(8L, BenchConfiguration.redisRetryAfter(h)); // 15 tokens at 2/s: 7.5 s, up
    h.set("X-RateLimit-Remaining", "0");
    h.set("X-RateLimit-Replenish-Rate", "1");
    assertEquals(20L, BenchConfiguration.redisRetryAfter(h));
    h.remove("X-RateLimit-Remaining");
    assertNull(BenchConfiguration.redisRetryAfter(h));
  }
}
