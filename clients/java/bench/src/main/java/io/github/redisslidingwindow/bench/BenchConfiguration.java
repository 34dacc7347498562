package io.github.redisslidingwindow.bench;

import io.github.redisslidingwindow.RateLimiter;
import io.github.redisslidingwindow.gateway.SlidingWindowRateLimiter;
import io.github.redisslidingwindow.lettuce.LettuceSendCommand;
import io.lettuce.core.ClientOptions;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import io.lettuce.core.TimeoutOptions;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.codec.ByteArrayCodec;
import java.time.Duration;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.cloud.gateway.filter.ratelimit.KeyResolver;
import org.springframework.cloud.gateway.filter.ratelimit.RedisRateLimiter;
import org.springframework.cloud.gateway.support.ConfigurationService;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.context.annotation.Primary;
import org.springframework.core.Ordered;
import org.springframework.core.annotation.Order;
import org.springframework.http.HttpHeaders;
import org.springframework.http.HttpStatus;
import org.springframework.web.server.WebFilter;
import reactor.core.publisher.Mono;

/** The beans of each variant (bench.variant), and the X-Id key resolver they share. */
@Configuration(proxyBeanMethods = false)
class BenchConfiguration {
  /** The identity is the X-Id header; none is an empty key (the gateway's deny-empty-key: 403). */
  @Bean
  KeyResolver idKeyResolver() {
    return exchange ->
        Mono.justOrEmpty(exchange.getRequest().getHeaders().getFirst("X-Id"))
            .filter(u -> !u.isEmpty());
  }

  /** Lettuce as in the example app: a short timeout, commands refused while disconnected. */
  @Bean(destroyMethod = "shutdown")
  @ConditionalOnProperty(name = "bench.variant", havingValue = "slidingwindow")
  RedisClient redisClient(
      @Value("${bench.redis-host}") String host, @Value("${bench.redis-port}") int port) {
    Duration timeout = Duration.ofMillis(500);
    RedisURI uri = RedisURI.create(host, port);
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
  @ConditionalOnProperty(name = "bench.variant", havingValue = "slidingwindow")
  StatefulRedisConnection<String, String> redisConnection(RedisClient client) {
    return client.connect();
  }

  /** Ours at its defaults (the core limiter's builder, the gateway limiter's scheduler). */
  @Bean
  @Primary // the default RateLimiter of RequestRateLimiter, over the gateway's redisRateLimiter
  @ConditionalOnProperty(name = "bench.variant", havingValue = "slidingwindow")
  SlidingWindowRateLimiter slidingWindowRateLimiter(
      StatefulRedisConnection<String, String> connection, ConfigurationService configuration) {
    RateLimiter core = RateLimiter.builder(new LettuceSendCommand(connection)).build();
    return new SlidingWindowRateLimiter(core, configuration);
  }

  @Bean(destroyMethod = "shutdown")
  @ConditionalOnProperty(name = "bench.variant", havingValue = "bucket4j")
  RedisClient bucket4jRedisClient(
      @Value("${bench.redis-host}") String host, @Value("${bench.redis-port}") int port) {
    return RedisClient.create(RedisURI.create(host, port));
  }

  @Bean(destroyMethod = "close")
  @ConditionalOnProperty(name = "bench.variant", havingValue = "bucket4j")
  StatefulRedisConnection<byte[], byte[]> bucket4jConnection(RedisClient bucket4jRedisClient) {
    return bucket4jRedisClient.connect(ByteArrayCodec.INSTANCE);
  }

  @Bean
  @Primary // the default RateLimiter of RequestRateLimiter, over the gateway's redisRateLimiter
  @ConditionalOnProperty(name = "bench.variant", havingValue = "bucket4j")
  Bucket4jRateLimiter bucket4jRateLimiter(
      StatefulRedisConnection<byte[], byte[]> bucket4jConnection,
      ConfigurationService configuration) {
    return new Bucket4jRateLimiter(bucket4jConnection, configuration);
  }

  /**
   * RedisRateLimiter sends no Retry-After: on its 429 this adds the wait its own headers give, the
   * tokens missing over the refill rate, rounded up to whole seconds (its script counts time in
   * whole seconds, so the true wait can be up to a second more). A WebFilter: it runs before the
   * gateway's filters whatever their order.
   */
  @Bean
  @Order(Ordered.HIGHEST_PRECEDENCE)
  @ConditionalOnProperty(name = "bench.variant", havingValue = "redis")
  WebFilter redisRetryAfter() {
    return (exchange, chain) -> {
      exchange
          .getResponse()
          .beforeCommit(
              () -> {
                HttpHeaders h = exchange.getResponse().getHeaders();
                if (HttpStatus.TOO_MANY_REQUESTS.equals(exchange.getResponse().getStatusCode())
                    && h.getFirst(HttpHeaders.RETRY_AFTER) == null) {
                  Long retry = redisRetryAfter(h);
                  if (retry != null) {
                    h.set(HttpHeaders.RETRY_AFTER, Long.toString(retry));
                  }
                }
                return Mono.empty();
              });
      return chain.filter(exchange);
    };
  }

  /** Whole seconds until RedisRateLimiter's bucket holds one request's tokens, from its headers. */
  static Long redisRetryAfter(HttpHeaders h) {
    try {
      long remaining = Long.parseLong(h.getFirst(RedisRateLimiter.REMAINING_HEADER));
      long requested = Long.parseLong(h.getFirst(RedisRateLimiter.REQUESTED_TOKENS_HEADER));
      long rate = Long.parseLong(h.getFirst(RedisRateLimiter.REPLENISH_RATE_HEADER));
      if (rate <= 0) {
        return null;
      }
      long missing = Math.max(1, requested - Math.max(0, remaining));
      return Math.max(1, (missing + rate - 1) / rate);
    } catch (NumberFormatException e) {
      return null; // a header missing (null) or not a number: no Retry-After
    }
  }
}
