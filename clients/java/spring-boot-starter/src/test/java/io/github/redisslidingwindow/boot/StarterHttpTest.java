package io.github.redisslidingwindow.boot;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.redisslidingwindow.CallOptions;
import io.github.redisslidingwindow.Limit;
import io.github.redisslidingwindow.MultiLimitResult;
import io.github.redisslidingwindow.RateLimiter;
import io.github.redisslidingwindow.TestServer;
import io.micrometer.core.instrument.MeterRegistry;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
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
 * The starter in a servlet app on a random port, over real HTTP, configured by properties only
 * ({@code spring.data.redis.url}, {@code slidingwindow.*}), on a real module server started here
 * and then stopped.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class StarterHttpTest {
  private TestServer redis;
  private ConfigurableApplicationContext app;
  private int port;
  private final AtomicInteger nextIp = new AtomicInteger(1);
  private final HttpClient http =
      HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();

  @BeforeAll
  void start() throws Exception {
    redis = TestServer.start(TestServer.Kind.MODULE);
    app =
        SpringApplication.run(
            StarterTestApp.class,
            "--server.port=0",
            "--server.address=127.0.0.1",
            "--spring.main.banner-mode=off",
            "--spring.data.redis.url=redis://127.0.0.1:" + redis.port,
            "--slidingwindow.trusted-proxies=127.0.0.1/32",
            "--slidingwindow.timeout=300ms",
            "--slidingwindow.policies[0].name=api",
            "--slidingwindow.policies[0].rates=3/minute",
            "--slidingwindow.policies[0].paths=/api/hello",
            "--slidingwindow.policies[1].name=burst",
            "--slidingwindow.policies[1].rates=10/hour",
            "--slidingwindow.policies[1].paths=/api/upload",
            "--slidingwindow.policies[1].methods=POST",
            "--management.endpoints.web.exposure.include=metrics");
    port = Integer.parseInt(app.getEnvironment().getProperty("local.server.port"));
  }

  @AfterAll
  void stop() throws Exception {
    if (app != null) {
      app.close();
    }
    if (redis != null) {
      redis.close();
    }
  }

  /** A client address of its own (the app trusts 127.0.0.1 as a proxy). */
  private String clientIp() {
    return "10.9." + (nextIp.get() / 250) + "." + (nextIp.getAndIncrement() % 250 + 1);
  }

  private HttpRequest request(String method, String path, String ip) {
    HttpRequest.Builder b =
        HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path))
            .timeout(Duration.ofSeconds(10))
            .method(method, HttpRequest.BodyPublishers.noBody());
    if (ip != null) {
      b.header("X-Forwarded-For", ip);
    }
    return b.build();
  }

  private HttpResponse<String> send(String method, String path, String ip) throws Exception {
    return http.send(request(method, path, ip), HttpResponse.BodyHandlers.ofString());
  }

  private double metric(String outcome, String policy) {
    return app.getBean(MeterRegistry.class)
        .get(MicrometerDecisionListener.REQUESTS)
        .tag("outcome", outcome)
        .tag("policy", policy)
        .counter()
        .count();
  }

  private double metricOrZero(String outcome, String policy) {
    var c =
        app.getBean(MeterRegistry.class)
            .find(MicrometerDecisionListener.REQUESTS)
            .tag("outcome", outcome)
            .tag("policy", policy)
            .counter();
    return c == null ? 0 : c.count();
  }

  @Test
  @Order(1)
  void exactlyTheLimitThen429WithTheExactRetryAfter() throws Exception {
    String ip = clientIp();
    double allowedBefore = metricOrZero("allowed", "api");
    double refusedBefore = metricOrZero("refused", "api");
    for (int i = 1; i <= 3; i++) {
      HttpResponse<String> r = send("GET", "/api/hello", ip);
      assertEquals(200, r.statusCode(), "request " + i);
      assertEquals("hello", r.body());
      assertEquals("3", r.headers().firstValue("X-RateLimit-Limit").orElse(""));
      assertEquals(
          Integer.toString(3 - i), r.headers().firstValue("X-RateLimit-Remaining").orElse(""));
      assertEquals("\"api\";q=3;w=60", r.headers().firstValue("RateLimit-Policy").orElse(""));
      assertFalse(r.headers().firstValue("Retry-After").isPresent());
    }
    HttpResponse<String> denied = send("GET", "/api/hello", ip);
    assertEquals(429, denied.statusCode());
    assertEquals("Too Many Requests\n", denied.body());
    assertEquals("0", denied.headers().firstValue("X-RateLimit-Remaining").orElse(""));
    long retry = Long.parseLong(denied.headers().firstValue("Retry-After").orElseThrow());
    // the server's own retry_after for the same key, asked right after (a peek counts nothing)
    MultiLimitResult peek =
        app.getBean(RateLimiter.class)
            .peekLimits("api:ip:" + ip, List.of(new Limit(3, 60_000)), CallOptions.defaults().ms());
    assertFalse(peek.allowed());
    assertTrue(
        peek.retryAfter() <= retry * 1000 && peek.retryAfter() > retry * 1000 - 1000 - 500,
        "Retry-After " + retry + " s, the server's retry_after " + peek.retryAfter() + " ms");
    assertEquals(
        "\"api\";r=0;t=" + retry,
        denied.headers().firstValue("RateLimit").orElse(""),
        "draft-11 state");

    assertEquals(200, send("GET", "/api/hello", clientIp()).statusCode(), "another client");
    for (int i = 0; i < 5; i++) {
      assertEquals(200, send("GET", "/open", ip).statusCode(), "no policy on /open");
    }
    assertEquals(allowedBefore + 4, metric("allowed", "api"));
    assertEquals(refusedBefore + 1, metric("refused", "api"));
  }

  @Test
  @Order(2)
  void aPolicyAppliesToItsMethodsOnly() throws Exception {
    String ip = clientIp();
    for (int i = 1; i <= 10; i++) {
      assertEquals(200, send("POST", "/api/upload", ip).statusCode(), "POST " + i);
    }
    assertEquals(429, send("POST", "/api/upload", ip).statusCode());
    HttpResponse<String> get = send("GET", "/api/upload", ip);
    assertFalse(get.headers().firstValue("X-RateLimit-Limit").isPresent(), "GET: no policy");
    assertEquals(10, metric("allowed", "burst"));
  }

  @Test
  @Order(3)
  void manyRequestsAtOnceGetExactlyTheLimit() throws Exception {
    String ip = clientIp();
    List<CompletableFuture<HttpResponse<String>>> all = new ArrayList<>();
    for (int i = 0; i < 20; i++) {
      all.add(
          http.sendAsync(request("GET", "/api/hello", ip), HttpResponse.BodyHandlers.ofString()));
    }
    int ok = 0;
    int refused = 0;
    for (CompletableFuture<HttpResponse<String>> f : all) {
      int s = f.get().statusCode();
      if (s == 200) {
        ok++;
      } else if (s == 429) {
        refused++;
      }
    }
    assertEquals(3, ok, "allowed of 20 at once");
    assertEquals(17, refused);
  }

  @Test
  @Order(4)
  void theCountersAreExposedThroughTheMetricsEndpoint() throws Exception {
    HttpResponse<String> r =
        send(
            "GET",
            "/actuator/metrics/slidingwindow.requests?tag=outcome:refused&tag=policy:api",
            null);
    assertEquals(200, r.statusCode(), r.body());
    Matcher m =
        Pattern.compile("\"statistic\"\\s*:\\s*\"COUNT\"\\s*,\\s*\"value\"\\s*:\\s*([0-9.]+)")
            .matcher(r.body());
    assertTrue(m.find(), r.body());
    assertEquals(metric("refused", "api"), Double.parseDouble(m.group(1)));
    assertEquals(18, Double.parseDouble(m.group(1)), "1 + 17 refusals so far");
  }

  @Test
  @Order(5)
  void redisStoppedFailsOpenAndCountsDegraded() throws Exception {
    String ip = clientIp();
    redis.close();
    double before = metricOrZero("degraded", "api");
    long start = System.nanoTime();
    for (int i = 0; i < 6; i++) {
      HttpResponse<String> r = send("GET", "/api/hello", ip);
      assertEquals(200, r.statusCode(), "fail-open, request " + i);
      assertEquals("hello", r.body());
      assertFalse(r.headers().firstValue("X-RateLimit-Limit").isPresent(), "degraded: no headers");
    }
    long ms = (System.nanoTime() - start) / 1_000_000;
    assertTrue(ms < 5_000, "6 requests with Redis stopped took " + ms + " ms");
    assertEquals(before + 6, metric("degraded", "api"));
    assertTrue(app.getBean(RateLimiter.class).isDown());
    assertEquals(
        1.0,
        app.getBean(MeterRegistry.class)
            .get(MicrometerDecisionListener.CIRCUIT_OPEN)
            .gauge()
            .value());
  }
}
