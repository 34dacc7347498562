package io.github.redisslidingwindow.boot;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.redisslidingwindow.LimitResult;
import io.github.redisslidingwindow.Mode;
import io.github.redisslidingwindow.RateLimiter;
import io.github.redisslidingwindow.SendCommand;
import io.github.redisslidingwindow.TestServer;
import io.github.redisslidingwindow.lettuce.LettuceSendCommand;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import io.lettuce.core.api.StatefulRedisConnection;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.data.redis.connection.RedisStandaloneConfiguration;
import org.springframework.data.redis.connection.lettuce.LettuceClientConfiguration;
import org.springframework.data.redis.connection.lettuce.LettuceConnectionFactory;

/**
 * Where the limiter's connection comes from: the application's LettuceConnectionFactory, its
 * Lettuce RedisClient, its SendCommand, or spring.data.redis.* (told apart on a real server by the
 * client name each connection carries).
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class StarterConnectionTest {
  private TestServer redis;
  private RedisClient direct;
  private StatefulRedisConnection<String, String> admin;

  @BeforeAll
  void start() throws Exception {
    redis = TestServer.start(TestServer.Kind.LIBRARY_ONLY);
    direct = RedisClient.create(RedisURI.create("127.0.0.1", redis.port));
    admin = direct.connect();
  }

  @AfterAll
  void stop() throws Exception {
    if (admin != null) {
      admin.close();
    }
    if (direct != null) {
      direct.shutdown();
    }
    if (redis != null) {
      redis.close();
    }
  }

  /** The client names of the server's connections, other than this test's own. */
  private List<String> names() {
    String list = admin.sync().clientList();
    return list.lines()
        .map(l -> l.replaceAll(".* name=(\\S*) .*", "$1"))
        .filter(n -> !n.isEmpty())
        .sorted()
        .toList();
  }

  private static ConfigurableApplicationContext run(Class<?> app, String... args) {
    String[] all = new String[args.length + 2];
    all[0] = "--spring.main.web-application-type=none";
    all[1] = "--spring.main.banner-mode=off";
    System.arraycopy(args, 0, all, 2, args.length);
    return SpringApplication.run(app, all);
  }

  private static void limits(RateLimiter l) {
    String id = "c-" + UUID.randomUUID();
    for (int i = 1; i <= 2; i++) {
      LimitResult r = l.check(id, 2, 3600);
      assertTrue(r.allowed());
      assertFalse(r.degraded());
      assertEquals(i, r.count());
    }
    assertFalse(l.check(id, 2, 3600).allowed());
    assertEquals(Mode.FUNCTION, l.mode(), "the library, loaded by the limiter");
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class WithFactory {
    static int port;

    @Bean
    LettuceConnectionFactory redisConnectionFactory() {
      return new LettuceConnectionFactory(
          new RedisStandaloneConfiguration("127.0.0.1", port),
          LettuceClientConfiguration.builder().clientName("app-factory").build());
    }
  }

  @Test
  void theApplicationsLettuceConnectionFactory() {
    WithFactory.port = redis.port;
    try (ConfigurableApplicationContext c =
        run(WithFactory.class, "--spring.data.redis.client-name=not-this")) {
      limits(c.getBean(RateLimiter.class));
      assertEquals(List.of("app-factory"), names(), "the factory's shared connection");
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class WithClient {
    static int port;

    @Bean(destroyMethod = "shutdown")
    RedisClient redisClient() {
      RedisURI uri = RedisURI.create("127.0.0.1", port);
      uri.setClientName("app-client");
      return RedisClient.create(uri);
    }
  }

  @Test
  void theApplicationsLettuceClient() {
    WithClient.port = redis.port;
    try (ConfigurableApplicationContext c = run(WithClient.class)) {
      limits(c.getBean(RateLimiter.class));
      assertEquals(List.of("app-client"), names());
    }
    assertEquals(List.of(), names(), "the connection closed with the context");
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class WithSender {
    static final AtomicInteger CALLS = new AtomicInteger();
    static StatefulRedisConnection<String, String> connection;

    @Bean
    SendCommand sender() {
      SendCommand s = new LettuceSendCommand(connection);
      return cmd -> {
        CALLS.incrementAndGet();
        return s.send(cmd);
      };
    }
  }

  @Test
  void theApplicationsSendCommand() {
    WithSender.connection = admin;
    try (ConfigurableApplicationContext c = run(WithSender.class)) {
      int before = WithSender.CALLS.get();
      limits(c.getBean(RateLimiter.class));
      assertTrue(WithSender.CALLS.get() - before >= 3, "every call through it");
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class Plain {}

  @Test
  void springDataRedisProperties() {
    try (ConfigurableApplicationContext c =
        run(
            Plain.class,
            "--spring.data.redis.host=127.0.0.1",
            "--spring.data.redis.port=" + redis.port,
            "--spring.data.redis.client-name=from-props",
            "--slidingwindow.backend=library")) {
      assertEquals(List.of(), names(), "no connection before the first call");
      limits(c.getBean(RateLimiter.class));
      assertEquals(List.of("from-props"), names());
    }
    assertEquals(List.of(), names(), "the starter's own client shut down with the context");
  }
}
