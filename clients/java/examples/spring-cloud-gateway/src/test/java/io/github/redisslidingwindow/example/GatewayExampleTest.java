package io.github.redisslidingwindow.example;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.sun.net.httpserver.HttpServer;
import io.github.redisslidingwindow.CallOptions;
import io.github.redisslidingwindow.Limit;
import io.github.redisslidingwindow.MultiLimitResult;
import io.github.redisslidingwindow.RateLimiter;
import io.github.redisslidingwindow.TestServer;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.TestMethodOrder;
import org.springframework.boot.SpringApplication;
import org.springframework.context.ConfigurableApplicationContext;

/**
 * The example app over real HTTP: the gateway (its own application.yml) in front of an upstream
 * started here, counting on a real module server started here, then that server stopped.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class GatewayExampleTest {
  private TestServer redis;
  private HttpServer upstream;
  private final AtomicInteger upstreamHits = new AtomicInteger();
  private ConfigurableApplicationContext app;
  private int port;
  private final HttpClient http =
      HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();

  @BeforeAll
  void start() throws Exception {
    redis = TestServer.start(TestServer.Kind.MODULE);
    upstream = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
    upstream.createContext(
        "/",
        ex -> {
          upstreamHits.incrementAndGet();
          byte[] body =
              ("upstream " + ex.getRequestURI().getPath()).getBytes(StandardCharsets.UTF_8);
          ex.sendResponseHeaders(200, body.length);
          ex.getResponseBody().write(body);
          ex.close();
        });
    upstream.start();
    app =
        SpringApplication.run(
            GatewayExampleApplication.class,
            "--server.port=0",
            "--server.address=127.0.0.1",
            "--upstream.uri=http://127.0.0.1:" + upstream.getAddress().getPort(),
            "--spring.data.redis.url=redis://127.0.0.1:" + redis.port,
            "--spring.main.banner-mode=off");
    port = Integer.parseInt(app.getEnvironment().getProperty("local.server.port"));
  }

  @AfterAll
  void stop() throws Exception {
    if (app != null) {
      app.close();
    }
    if (upstream != null) {
      upstream.stop(0);
    }
    if (redis != null) {
      redis.close();
    }
  }

  private HttpResponse<String> get(String path, String user) throws Exception {
    HttpRequest.Builder b =
        HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path))
            .timeout(Duration.ofSeconds(10));
    if (user != null) {
      b.header("X-User", user);
    }
    return http.send(b.build(), HttpResponse.BodyHandlers.ofString());
  }

  /**
   * Exactly the limit passes to the upstream, then 429 with the Retry-After the server's own
   * retry_after gives (in whole seconds, rounded up, less the few ms between the two asks).
   */
  private void exactlyTheLimitThen429(String path, String route, long limit, long windowMs)
      throws Exception {
    // Not across a window's boundary (the server's clock is this machine's): a count of the
    // previous window would weigh in the sliding estimate and change X-RateLimit-Remaining.
    long left = windowMs - System.currentTimeMillis() % windowMs;
    if (left < 3000) {
      Thread.sleep(left + 50);
    }
    String user = "u-" + UUID.randomUUID();
    int before = upstreamHits.get();
    for (long i = 1; i <= limit; i++) {
      HttpResponse<String> r = get(path, user);
      assertEquals(200, r.statusCode(), path + " request " + i);
      assertEquals("upstream " + path, r.body());
      assertEquals(Long.toString(limit), r.headers().firstValue("X-RateLimit-Limit").orElse(""));
      assertEquals(
          Long.toString(limit - i), r.headers().firstValue("X-RateLimit-Remaining").orElse(""));
      assertTrue(r.headers().firstValue("RateLimit-Policy").isPresent());
      assertFalse(r.headers().firstValue("Retry-After").isPresent());
    }
    HttpResponse<String> denied = get(path, user);
    assertEquals(429, denied.statusCode(), path + " request " + (limit + 1));
    assertEquals(limit, upstreamHits.get() - before, "the refused one never reached upstream");
    long retry = Long.parseLong(denied.headers().firstValue("Retry-After").orElseThrow());
    MultiLimitResult peek =
        app.getBean(RateLimiter.class)
            .peekLimits(
                route + ":" + user,
                List.of(new Limit(limit, windowMs)),
                CallOptions.defaults().ms());
    assertFalse(peek.allowed());
    assertTrue(
        peek.retryAfter() <= retry * 1000 && peek.retryAfter() > retry * 1000 - 1000 - 500,
        path + ": Retry-After " + retry + " s, the server's retry_after " + peek.retryAfter());
    assertTrue(retry >= 1 && retry <= 2 * windowMs / 1000, path + ": " + retry);
    assertEquals("0", denied.headers().firstValue("X-RateLimit-Remaining").orElse(""));
    HttpResponse<String> other = get(path, "u-" + UUID.randomUUID());
    assertEquals(200, other.statusCode(), "another user has a count of its own");
  }

  private double counted(String policy, String outcome) {
    var c =
        app.getBean(io.micrometer.core.instrument.MeterRegistry.class)
            .find("slidingwindow.requests")
            .tag("policy", policy)
            .tag("outcome", outcome)
            .counter();
    return c == null ? 0 : c.count();
  }

  @Test
  @Order(1)
  void perMinuteRoute() throws Exception {
    exactlyTheLimitThen429("/minute/a", "per-minute", 3, 60_000);
    // the starter's counters, told by the auto-configured gateway limiter
    assertEquals(4, counted("per-minute", "allowed"), "3 of the user's, 1 of another user");
    assertEquals(1, counted("per-minute", "refused"));
  }

  @Test
  @Order(2)
  void perHourRoute() throws Exception {
    exactlyTheLimitThen429("/hour/b", "per-hour", 5, 3_600_000);
    HttpResponse<String> r = get("/hour/b", "u-" + UUID.randomUUID());
    assertEquals(
        "\"hourly\";q=5;w=3600", r.headers().firstValue("RateLimit-Policy").orElse(""), "policy");
  }

  @Test
  @Order(3)
  void noUserIsTheEmptyKeyStatus() throws Exception {
    int before = upstreamHits.get();
    assertEquals(403, get("/minute/a", null).statusCode(), "deny-empty-key, empty-key-status-code");
    assertEquals(before, upstreamHits.get());
  }

  @Test
  @Order(4)
  void redisStoppedFailsOpen() throws Exception {
    String user = "u-" + UUID.randomUUID();
    for (int i = 0; i < 3; i++) {
      assertEquals(200, get("/minute/a", user).statusCode());
    }
    assertEquals(429, get("/minute/a", user).statusCode());
    redis.close();
    int before = upstreamHits.get();
    // The refusal is still exact: the deny cache answers it without Redis until its retry instant.
    HttpResponse<String> cached = get("/minute/a", user);
    assertEquals(429, cached.statusCode(), "the deny cache's refusal");
    assertTrue(cached.headers().firstValue("Retry-After").isPresent());
    assertEquals(before, upstreamHits.get());
    // Another user's call meets the outage: fail-open, and the circuit opens, which empties the
    // deny cache: from then on every request passes without headers.
    assertEquals(200, get("/minute/a", "u-" + UUID.randomUUID()).statusCode());
    assertTrue(app.getBean(RateLimiter.class).isDown(), "the circuit is open");
    for (int i = 0; i < 5; i++) {
      HttpResponse<String> r = get("/minute/a", user);
      assertEquals(200, r.statusCode(), "Redis stopped: fail-open (slidingwindow.fail-open)");
      assertEquals("upstream /minute/a", r.body());
      assertFalse(r.headers().firstValue("X-RateLimit-Limit").isPresent(), "degraded: no headers");
    }
    assertEquals(200, get("/hour/b", "u-" + UUID.randomUUID()).statusCode());
    assertEquals(7, upstreamHits.get() - before);
    assertTrue(app.getBean(RateLimiter.class).isDown(), "the circuit is open");
  }
}
