package io.github.redisslidingwindow.boot;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.springframework.test.web.servlet.request.MockMvcRequestBuilders.get;

import io.github.redisslidingwindow.CallOptions;
import io.github.redisslidingwindow.RateLimiter;
import io.github.redisslidingwindow.TestServer;
import io.github.redisslidingwindow.WindowCounts;
import io.micrometer.core.instrument.MeterRegistry;
import java.util.UUID;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.springframework.boot.SpringApplication;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.mock.web.MockHttpServletResponse;
import org.springframework.test.web.servlet.MockMvc;
import org.springframework.test.web.servlet.request.MockHttpServletRequestBuilder;
import org.springframework.test.web.servlet.setup.MockMvcBuilders;
import org.springframework.web.context.WebApplicationContext;

/**
 * The filter's identity (API key, user, address behind trusted proxies) through MockMvc on the
 * starter's app, on a real module server; then fail-closed with the server stopped.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class StarterMockMvcTest {
  private TestServer redis;
  private ConfigurableApplicationContext app;
  private MockMvc mvc;
  private RateLimiter limiter;

  @BeforeAll
  void start() throws Exception {
    redis = TestServer.start(TestServer.Kind.MODULE);
    app =
        SpringApplication.run(
            StarterTestApp.class,
            "--server.port=0",
            "--server.address=127.0.0.1",
            "--spring.main.banner-mode=off",
            "--spring.data.redis.host=127.0.0.1",
            "--spring.data.redis.port=" + redis.port,
            "--slidingwindow.fail-open=false",
            "--slidingwindow.prefix=mvc:",
            "--slidingwindow.key-header=X-Api-Key",
            "--slidingwindow.trusted-proxies=10.0.0.0/8,fd00::/8",
            "--slidingwindow.policies[0].name=api",
            "--slidingwindow.policies[0].rates=2/minute;100/hour",
            "--slidingwindow.policies[0].paths=/api/**");
    mvc =
        MockMvcBuilders.webAppContextSetup((WebApplicationContext) app)
            .addFilters(app.getBean(SlidingWindowFilter.class))
            .build();
    limiter = app.getBean(RateLimiter.class);
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

  private static MockHttpServletRequestBuilder from(String peer) {
    return get("/api/hello")
        .with(
            r -> {
              r.setRemoteAddr(peer);
              return r;
            });
  }

  private MockHttpServletResponse send(MockHttpServletRequestBuilder b) throws Exception {
    return mvc.perform(b).andReturn().getResponse();
  }

  /** What the key counted in this minute's window and the one before (a test may cross one). */
  private long counted(String identity) {
    WindowCounts c = limiter.counts("api:" + identity, 60_000, CallOptions.defaults().ms());
    return c.previous() + c.current();
  }

  @Test
  void anApiKeyIsOneIdentityFromAnyAddressAndAUserAnother() throws Exception {
    String key = "k-" + UUID.randomUUID();
    assertEquals(200, send(from("192.0.2.1").header("X-Api-Key", key)).getStatus());
    assertEquals(200, send(from("192.0.2.2").header("X-Api-Key", key)).getStatus());
    MockHttpServletResponse denied = send(from("192.0.2.3").header("X-Api-Key", key));
    assertEquals(429, denied.getStatus());
    assertEquals("0", denied.getHeader("X-RateLimit-Remaining"));
    // two limits: the draft-11 lists name each <policy>/<window>s
    assertEquals(
        "\"api/60s\";q=2;w=60, \"api/3600s\";q=100;w=3600", denied.getHeader("RateLimit-Policy"));
    assertEquals(2, counted("key:" + key));

    String user = "alice-" + UUID.randomUUID();
    MockHttpServletResponse r = send(from("192.0.2.3").principal(() -> user));
    assertEquals(200, r.getStatus(), "a user has a count of its own");
    assertEquals(1, counted("user:" + user));
    assertEquals(0, counted("ip:192.0.2.3"));
  }

  @Test
  void theAddressIsThePeerOrTheRightmostUntrustedForwardedHop() throws Exception {
    // an untrusted peer: its X-Forwarded-For is not believed
    assertEquals(
        200, send(from("198.51.100.7").header("X-Forwarded-For", "203.0.113.1")).getStatus());
    assertEquals(1, counted("ip:198.51.100.7"));
    assertEquals(0, counted("ip:203.0.113.1"));
    // a trusted proxy (10/8) behind another (10.1.2.3): the client is the hop before them
    assertEquals(
        200, send(from("10.0.0.1").header("X-Forwarded-For", "203.0.113.9, 10.1.2.3")).getStatus());
    assertEquals(1, counted("ip:203.0.113.9"));
    // IPv6 by its /64
    assertEquals(200, send(from("2001:db8:1:2::5")).getStatus());
    assertEquals(200, send(from("2001:db8:1:2::6")).getStatus());
    assertEquals(2, counted("ip:2001:db8:1:2::/64"));
    // a path no policy covers is neither counted nor given headers
    MockHttpServletResponse open = send(get("/open").with(r -> r));
    assertEquals(200, open.getStatus());
    assertNull(open.getHeader("X-RateLimit-Limit"));
  }

  @Test
  void redisStoppedFailsClosed() throws Exception {
    try (TestServer other = TestServer.start(TestServer.Kind.MODULE)) {
      ConfigurableApplicationContext closed =
          SpringApplication.run(
              StarterTestApp.class,
              "--server.port=0",
              "--server.address=127.0.0.1",
              "--spring.main.banner-mode=off",
              "--spring.data.redis.url=redis://127.0.0.1:" + other.port,
              "--slidingwindow.fail-open=false",
              "--slidingwindow.policies[0].name=api",
              "--slidingwindow.policies[0].rates=5/minute",
              "--slidingwindow.policies[0].paths=/api/**");
      try {
        MockMvc m =
            MockMvcBuilders.webAppContextSetup((WebApplicationContext) closed)
                .addFilters(closed.getBean(SlidingWindowFilter.class))
                .build();
        assertEquals(200, m.perform(from("192.0.2.50")).andReturn().getResponse().getStatus());
        other.close();
        for (int i = 0; i < 3; i++) {
          MockHttpServletResponse r = m.perform(from("192.0.2.50")).andReturn().getResponse();
          assertEquals(429, r.getStatus(), "Redis stopped, fail-closed: refused");
          assertNull(r.getHeader("Retry-After"), "degraded: no headers");
        }
        MeterRegistry reg = closed.getBean(MeterRegistry.class);
        assertEquals(
            3.0,
            reg.get(MicrometerDecisionListener.REQUESTS)
                .tag("outcome", "degraded")
                .counter()
                .count());
        assertEquals(
            1.0,
            reg.get(MicrometerDecisionListener.REQUESTS)
                .tag("outcome", "allowed")
                .counter()
                .count());
      } finally {
        closed.close();
      }
    }
  }
}
