package io.github.redisslidingwindow.boot;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.redisslidingwindow.DenyCache;
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
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.springframework.boot.SpringApplication;
import org.springframework.context.ConfigurableApplicationContext;

/**
 * The servlet filter's deny cache over real HTTP: on by default (20 requests on one refused
 * identity cost Redis 3 CHECKs, INFO commandstats; 17 counted in {@code
 * slidingwindow.deny_cache.hits}), off with {@code slidingwindow.deny-cache.enabled=false}, and
 * never used in shadow mode (20 CHECKs each).
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class StarterDenyCacheTest {
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

  @Test
  void thePropertiesDefaultsAreTheCoresDefaults() {
    SlidingWindowProperties.DenyCache p = new SlidingWindowProperties().getDenyCache();
    assertTrue(p.isEnabled());
    assertEquals(DenyCache.DEFAULT_MAX_ENTRIES, p.getMaxEntries());
    assertEquals(DenyCache.DEFAULT_CLOCK_REFRESH, p.getClockRefresh());
  }

  @ParameterizedTest
  @ValueSource(strings = {"default", "off", "shadow"})
  void twentyRequestsOnOneRefusedIdentity(String mode) throws Exception {
    List<String> args =
        new ArrayList<>(
            List.of(
                "--server.port=0",
                "--server.address=127.0.0.1",
                "--spring.main.banner-mode=off",
                "--spring.data.redis.url=redis://127.0.0.1:" + redis.port,
                "--slidingwindow.prefix=" + mode + ":",
                "--slidingwindow.key-source=header",
                "--slidingwindow.key-header=X-Id",
                "--slidingwindow.policies[0].name=api",
                "--slidingwindow.policies[0].rates=2/minute",
                "--slidingwindow.policies[0].paths=/api/hello"));
    if (mode.equals("off")) {
      args.add("--slidingwindow.deny-cache.enabled=false");
    }
    if (mode.equals("shadow")) {
      args.add("--slidingwindow.filter.shadow=true");
    }
    try (ConfigurableApplicationContext app =
        SpringApplication.run(StarterTestApp.class, args.toArray(new String[0]))) {
      int port = Integer.parseInt(app.getEnvironment().getProperty("local.server.port"));
      DenyCache cache = app.getBeanProvider(DenyCache.class).getIfAvailable();
      RateLimiter limiter = app.getBean(RateLimiter.class);
      if (mode.equals("off")) {
        assertNull(cache, "no DenyCache bean");
        assertNull(limiter.denyCache());
      } else {
        assertNotNull(cache);
        assertTrue(limiter.denyCache() == cache, "the limiter bean has the starter's cache");
      }
      long before = redis.calls("slidingwindow.check");
      int refused = 0;
      for (int i = 0; i < 20; i++) {
        HttpResponse<String> r =
            http.send(
                HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + "/api/hello"))
                    .header("X-Id", "one")
                    .timeout(Duration.ofSeconds(10))
                    .build(),
                HttpResponse.BodyHandlers.ofString());
        if (r.statusCode() == 429) {
          refused++;
          long retry = Long.parseLong(r.headers().firstValue("Retry-After").orElseThrow());
          assertTrue(retry >= 1 && retry <= 60, "Retry-After " + retry);
        } else {
          assertEquals(200, r.statusCode());
        }
      }
      assertEquals(mode.equals("shadow") ? 0 : 18, refused, mode + ": refused of 20");
      assertEquals(
          mode.equals("default") ? 3 : 20,
          redis.calls("slidingwindow.check") - before,
          mode + ": CHECKs Redis saw for 20 requests");
      MeterRegistry meters = app.getBean(MeterRegistry.class);
      var hits = meters.find(MicrometerDecisionListener.DENY_CACHE_HITS).functionCounter();
      if (mode.equals("off")) {
        assertNull(hits, "no deny-cache counter without a cache");
      } else {
        assertNotNull(hits);
        assertEquals(mode.equals("default") ? 17 : 0, hits.count(), mode + ": deny-cache hits");
      }
      assertEquals(
          18, // shadow mode counts what it would have refused
          meters
              .get(MicrometerDecisionListener.REQUESTS)
              .tag("policy", "api")
              .tag("outcome", "refused")
              .counter()
              .count(),
          mode + ": refused (the cache's answers included)");
    }
  }
}
