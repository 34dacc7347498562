package io.github.redisslidingwindow.example;

import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.cloud.gateway.filter.ratelimit.KeyResolver;
import org.springframework.context.annotation.Bean;
import reactor.core.publisher.Mono;

/**
 * A gateway in front of one upstream, two rate-limited routes (application.yml): /minute/** at 3
 * per minute and /hour/** at 5 per hour, per X-User header (no header: 403). The limiter and the
 * {@code slidingWindowRateLimiter} bean the routes name come from the Spring Boot starter ({@code
 * spring.data.redis.url}, {@code slidingwindow.*}); the app declares only who a caller is.
 */
@SpringBootApplication
public class GatewayExampleApplication {
  public static void main(String[] args) {
    SpringApplication.run(GatewayExampleApplication.class, args);
  }

  /** The caller is its X-User header; none is an empty key (denied: deny-empty-key). */
  @Bean
  KeyResolver userKeyResolver() {
    return exchange ->
        Mono.justOrEmpty(exchange.getRequest().getHeaders().getFirst("X-User"))
            .filter(u -> !u.isBlank());
  }
}
