package io.github.redisslidingwindow.example;

import io.github.redisslidingwindow.RateLimiter;
import io.github.redisslidingwindow.gateway.SlidingWindowRateLimiter;
import io.github.redisslidingwindow.lettuce.LettuceSendCommand;
import io.lettuce.core.ClientOptions;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import io.lettuce.core.TimeoutOptions;
import io.lettuce.core.api.StatefulRedisConnection;
import java.time.Duration;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.cloud.gateway.filter.ratelimit.KeyResolver;
import org.springframework.cloud.gateway.support.ConfigurationService;
import org.springframework.context.annotation.Bean;
import reactor.core.publisher.Mono;

/**
 * A gateway in front of one upstream, two rate-limited routes (application.yml): /minute/** at 3
 * per minute and /hour/** at 5 per hour, per X-User header (no header: 403).
 */
@SpringBootApplication
public class GatewayExampleApplication {
  public static void main(String[] args) {
    SpringApplication.run(GatewayExampleApplication.class, args);
  }

  /** Lettuce with a short timeout, and commands refused while disconnected: an outage is fast. */
  @Bean(destroyMethod = "shutdown")
  RedisClient redisClient(
      @Value("${slidingwindow.redis-url:redis://127.0.0.1:6379}") String url,
      @Value("${slidingwindow.timeout:500ms}") Duration timeout) {
    RedisURI uri = RedisURI.create(url);
    uri.setTimeout(timeout);
    RedisClient c = RedisClient.create(uri);
    c.setOptions(
        ClientOptions.builder()
            .disconnectedBehavior(ClientOptions.DisconnectedBehavior.REJECT_COMMANDS)
            .timeoutOptions(TimeoutOptions.enabled(timeout))
            .build());
    return c;
  }

  @Bean(destroyMethod = "close")
  StatefulRedisConnection<String, String> redisConnection(RedisClient client) {
    return client.connect();
  }

  @Bean
  RateLimiter coreRateLimiter(
      StatefulRedisConnection<String, String> connection,
      @Value("${slidingwindow.fail-open:true}") boolean failOpen) {
    return RateLimiter.builder(new LettuceSendCommand(connection)).failOpen(failOpen).build();
  }

  @Bean
  SlidingWindowRateLimiter slidingWindowRateLimiter(
      RateLimiter coreRateLimiter, ConfigurationService configurationService) {
    return new SlidingWindowRateLimiter(coreRateLimiter, configurationService);
  }

  /** The caller is its X-User header; none is an empty key (denied: deny-empty-key). */
  @Bean
  KeyResolver userKeyResolver() {
    return exchange ->
        Mono.justOrEmpty(exchange.getRequest().getHeaders().getFirst("X-User"))
            .filter(u -> !u.isBlank());
  }
}
