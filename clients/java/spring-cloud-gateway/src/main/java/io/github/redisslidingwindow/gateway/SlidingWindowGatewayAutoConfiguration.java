package io.github.redisslidingwindow.gateway;

import io.github.redisslidingwindow.DecisionListener;
import io.github.redisslidingwindow.DenyCache;
import io.github.redisslidingwindow.RateLimiter;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.cloud.gateway.config.GatewayAutoConfiguration;
import org.springframework.cloud.gateway.filter.ratelimit.AbstractRateLimiter;
import org.springframework.cloud.gateway.support.ConfigurationService;
import org.springframework.context.annotation.Bean;

/**
 * The {@link SlidingWindowRateLimiter} bean {@code slidingWindowRateLimiter}, on the application's
 * core {@link RateLimiter} (the one the Spring Boot starter makes from {@code spring.data.redis.*}
 * and {@code slidingwindow.*}, or the application's own), unless the application declares its own.
 * Before the gateway's auto-configuration, whose {@code RequestRateLimiter} filter factory is only
 * made when a rate limiter bean exists by then. Its deny cache is the limiter's (the starter's
 * {@code DenyCache} bean), off with {@code slidingwindow.deny-cache.enabled=false}.
 */
@AutoConfiguration(
    afterName = "io.github.redisslidingwindow.boot.SlidingWindowAutoConfiguration",
    before = GatewayAutoConfiguration.class)
@ConditionalOnClass({AbstractRateLimiter.class, RateLimiter.class})
@ConditionalOnProperty(name = "spring.cloud.gateway.server.webflux.enabled", matchIfMissing = true)
public class SlidingWindowGatewayAutoConfiguration {
  @Bean
  @ConditionalOnBean(RateLimiter.class)
  @ConditionalOnMissingBean(SlidingWindowRateLimiter.class)
  SlidingWindowRateLimiter slidingWindowRateLimiter(
      RateLimiter limiter,
      ConfigurationService configurationService,
      ObjectProvider<DecisionListener> listener,
      ObjectProvider<DenyCache> cache,
      @Value("${slidingwindow.deny-cache.enabled:true}") boolean denyCache) {
    SlidingWindowRateLimiter l =
        new SlidingWindowRateLimiter(limiter, configurationService)
            .listener(listener.getIfUnique(() -> DecisionListener.NONE));
    DenyCache c = cache.getIfUnique();
    if (!denyCache) {
      l.denyCache(null);
    } else if (limiter.denyCache() == null && c != null) {
      l.denyCache(c); // the starter's (the one its metrics count)
    }
    return l;
  }
}
