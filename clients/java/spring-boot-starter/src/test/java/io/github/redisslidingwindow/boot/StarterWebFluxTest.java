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
import java.util.List;
import org.junit.jupiter.api.Test;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.RestController;
import reactor.core.publisher.Mono;

/**
 * The starter in a WebFlux app (Netty, random port), over real HTTP: the WebFilter's exact limit
 * then 429 with the server's Retry-After, the address behind a trusted proxy, the counters, and
 * Redis stopped answered fail-open.
 */
class StarterWebFluxTest {
  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @RestController
    static class Hello {
      @GetMapping("/api/hello")
      Mono<String> hello() {
        return Mono.just("hello");
      }
    }
  }

  private final HttpClient http =
      HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();

  private HttpResponse<String> get(int port, String ip) throws Exception {
    return http.send(
        HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + "/api/hello"))
            .header("X-Forwarded-For", ip)
            .timeout(Duration.ofSeconds(10))
            .build(),
        HttpResponse.BodyHandlers.ofString());
  }

  @Test
  void exactlyTheLimitThen429ThenFailOpen() throws Exception {
    TestServer redis = TestServer.start(TestServer.Kind.MODULE);
    try (ConfigurableApplicationContext app =
        SpringApplication.run(
            App.class,
            "--spring.main.web-application-type=reactive",
            "--server.port=0",
            "--server.address=127.0.0.1",
            "--spring.main.banner-mode=off",
            "--spring.data.redis.url=redis://127.0.0.1:" + redis.port,
            "--slidingwindow.trusted-proxies=127.0.0.1/32",
            "--slidingwindow.policies[0].name=flux",
            "--slidingwindow.policies[0].rates=3/minute",
            "--slidingwindow.policies[0].paths=/api/**")) {
      assertTrue(app.getBean(SlidingWindowWebFilter.class) != null);
      int port = Integer.parseInt(app.getEnvironment().getProperty("local.server.port"));
      String ip = "198.51.100.77";
      for (int i = 1; i <= 3; i++) {
        HttpResponse<String> r = get(port, ip);
        assertEquals(200, r.statusCode(), "request " + i);
        assertEquals("hello", r.body());
        assertEquals(
            Integer.toString(3 - i), r.headers().firstValue("X-RateLimit-Remaining").orElse(""));
      }
      HttpResponse<String> denied = get(port, ip);
      assertEquals(429, denied.statusCode());
      assertEquals("Too Many Requests\n", denied.body());
      long retry = Long.parseLong(denied.headers().firstValue("Retry-After").orElseThrow());
      MultiLimitResult peek =
          app.getBean(RateLimiter.class)
              .peekLimits(
                  "flux:ip:" + ip, List.of(new Limit(3, 60_000)), CallOptions.defaults().ms());
      assertTrue(
          peek.retryAfter() <= retry * 1000 && peek.retryAfter() > retry * 1000 - 1500,
          "Retry-After " + retry + " s, the server's retry_after " + peek.retryAfter() + " ms");
      assertEquals(200, get(port, "198.51.100.78").statusCode(), "another client");

      MeterRegistry reg = app.getBean(MeterRegistry.class);
      assertEquals(
          4.0,
          reg.get(MicrometerDecisionListener.REQUESTS).tag("outcome", "allowed").counter().count());
      assertEquals(
          1.0,
          reg.get(MicrometerDecisionListener.REQUESTS).tag("outcome", "refused").counter().count());

      redis.close();
      for (int i = 0; i < 4; i++) {
        HttpResponse<String> r = get(port, ip);
        assertEquals(200, r.statusCode(), "Redis stopped: fail-open");
        assertFalse(r.headers().firstValue("X-RateLimit-Limit").isPresent());
      }
      assertEquals(
          4.0,
          reg.get(MicrometerDecisionListener.REQUESTS)
              .tag("outcome", "degraded")
              .counter()
              .count());
    } finally {
      redis.close();
    }
  }
}
