package io.github.redisslidingwindow.boot;

import io.github.redisslidingwindow.DecisionListener;
import io.github.redisslidingwindow.DenyCache;
import io.github.redisslidingwindow.RateLimiter;
import io.github.redisslidingwindow.SendCommand;
import io.lettuce.core.AbstractRedisClient;
import io.lettuce.core.ClientOptions;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import io.lettuce.core.SocketOptions;
import io.lettuce.core.TimeoutOptions;
import io.lettuce.core.cluster.ClusterClientOptions;
import io.lettuce.core.cluster.RedisClusterClient;
import io.micrometer.core.instrument.MeterRegistry;
import jakarta.servlet.Filter;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.springframework.beans.factory.BeanFactory;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.boot.autoconfigure.condition.ConditionalOnWebApplication;
import org.springframework.boot.context.properties.EnableConfigurationProperties;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.util.ClassUtils;
import org.springframework.web.filter.OncePerRequestFilter;

/**
 * The limiter, the servlet filter and the metrics, from {@code slidingwindow.*}.
 *
 * <p>The limiter ({@link RateLimiter}, unless the application has one) sends through the
 * application's {@link SendCommand} bean if it has one; else through a connection of its Spring
 * Data Redis {@code LettuceConnectionFactory} (the factory's shared connection); else of its
 * Lettuce {@code RedisClient} / {@code RedisClusterClient} bean; else of a Lettuce client the
 * starter makes from {@code spring.data.redis.*} (url or host/port/..., or cluster.nodes), with
 * {@code slidingwindow.timeout} as its command timeout and commands refused while disconnected, so
 * that an outage is answered at once. The connection is made on the first call.
 */
@AutoConfiguration(
    afterName = "org.springframework.boot.data.redis.autoconfigure.DataRedisAutoConfiguration",
    beforeName = {
      "io.github.redisslidingwindow.gateway.SlidingWindowGatewayAutoConfiguration",
      "org.springframework.cloud.gateway.config.GatewayAutoConfiguration"
    })
@ConditionalOnClass(RateLimiter.class)
@ConditionalOnProperty(prefix = "slidingwindow", name = "enabled", matchIfMissing = true)
@EnableConfigurationProperties({SlidingWindowProperties.class, RedisConnectionProperties.class})
public class SlidingWindowAutoConfiguration {
  /** The connect and handshake timeout when spring.data.redis.connect-timeout is not set. */
  static final Duration CONNECT_TIMEOUT = Duration.ofSeconds(5);

  private static final String FACTORY =
      "org.springframework.data.redis.connection.lettuce.LettuceConnectionFactory";

  @Bean
  @ConditionalOnMissingBean({RateLimiter.class, SendCommand.class})
  LettuceConnector slidingWindowConnector(
      SlidingWindowProperties props,
      RedisConnectionProperties redis,
      ObjectProvider<AbstractRedisClient> clients,
      BeanFactory beans) {
    if (ClassUtils.isPresent(FACTORY, SlidingWindowAutoConfiguration.class.getClassLoader())) {
      LettuceConnector c = DataRedisConnections.fromFactory(beans);
      if (c != null) {
        return c;
      }
    }
    AbstractRedisClient client = clients.getIfUnique();
    if (client != null) {
      return LettuceConnector.of(client, props.getTimeout(), false);
    }
    return LettuceConnector.of(ownClient(props, redis), props.getTimeout(), true);
  }

  /** A Lettuce client of the starter's own, from {@code spring.data.redis.*}. */
  static AbstractRedisClient ownClient(SlidingWindowProperties props, RedisConnectionProperties r) {
    // The connection's handshake (HELLO, AUTH, SELECT) has the connect timeout; each command after
    // it the limiter's timeout (LettuceConnector sets it on the connection).
    Duration handshake = r.getConnectTimeout() != null ? r.getConnectTimeout() : CONNECT_TIMEOUT;
    TimeoutOptions timeouts = TimeoutOptions.enabled();
    SocketOptions socket = SocketOptions.builder().connectTimeout(handshake).build();
    List<String> nodes = r.getCluster().getNodes();
    if (!nodes.isEmpty()) {
      List<RedisURI> uris = new ArrayList<>();
      for (String node : nodes) {
        uris.add(uri(r, handshake, "redis://" + node.strip()));
      }
      RedisClusterClient c = RedisClusterClient.create(uris);
      // Not REJECT_COMMANDS here: a cluster connection connects to a slot's node on its first
      // command, which that setting would refuse; a command waiting for a node that does not come
      // back fails at the timeout instead.
      c.setOptions(
          ClusterClientOptions.builder().timeoutOptions(timeouts).socketOptions(socket).build());
      return c;
    }
    RedisURI uri = uri(r, handshake, r.getUrl());
    RedisClient c = RedisClient.create(uri);
    c.setOptions(
        ClientOptions.builder()
            .disconnectedBehavior(ClientOptions.DisconnectedBehavior.REJECT_COMMANDS)
            .timeoutOptions(timeouts)
            .socketOptions(socket)
            .build());
    return c;
  }

  private static RedisURI uri(RedisConnectionProperties r, Duration timeout, String url) {
    RedisURI uri;
    if (url != null && !url.isBlank()) {
      uri = RedisURI.create(url);
    } else {
      uri = RedisURI.create(r.getHost(), r.getPort());
      uri.setDatabase(r.getDatabase());
    }
    if (r.getPassword() != null) {
      if (r.getUsername() != null) {
        uri.setAuthentication(r.getUsername(), r.getPassword());
      } else {
        uri.setAuthentication(r.getPassword());
      }
    }
    if (Boolean.TRUE.equals(r.getSsl().getEnabled())) {
      uri.setSsl(true);
    }
    if (r.getClientName() != null) {
      uri.setClientName(r.getClientName());
    }
    if (timeout != null) {
      uri.setTimeout(timeout);
    }
    return uri;
  }

  /** The deny cache (off with {@code slidingwindow.deny-cache.enabled=false}). */
  @Bean
  @ConditionalOnMissingBean
  @ConditionalOnProperty(
      prefix = "slidingwindow.deny-cache",
      name = "enabled",
      matchIfMissing = true)
  DenyCache slidingWindowDenyCache(SlidingWindowProperties props) {
    return new DenyCache(
        props.getDenyCache().getMaxEntries(), props.getDenyCache().getClockRefresh());
  }

  @Bean
  @ConditionalOnMissingBean
  RateLimiter slidingWindowLimiter(
      SlidingWindowProperties props, SendCommand sender, ObjectProvider<DenyCache> cache) {
    return RateLimiter.builder(sender)
        .prefix(props.getPrefix())
        .failOpen(props.isFailOpen())
        .backend(props.getBackend())
        .probeInterval(props.getProbeInterval())
        .denyCache(props.getDenyCache().isEnabled() ? cache.getIfUnique() : null)
        .build();
  }

  /**
   * The limiter the middlewares ask: without a deny cache when it is off; else the limiter's own
   * cache, or the starter's when the limiter has none.
   */
  static RateLimiter withCache(RateLimiter limiter, boolean enabled, DenyCache cache) {
    if (!enabled) {
      return limiter.withDenyCache(null);
    }
    if (limiter.denyCache() != null || cache == null) {
      return limiter;
    }
    return limiter.withDenyCache(cache);
  }

  /** The Micrometer counters, when Micrometer is there and the application has a registry. */
  @Configuration(proxyBeanMethods = false)
  @ConditionalOnClass(MeterRegistry.class)
  static class Metrics {
    @Bean
    @ConditionalOnMissingBean
    DecisionListener slidingWindowMetrics(
        ObjectProvider<MeterRegistry> registry,
        RateLimiter limiter,
        SlidingWindowProperties props,
        ObjectProvider<DenyCache> cache) {
      MeterRegistry r = registry.getIfUnique();
      return r == null
          ? DecisionListener.NONE
          : new MicrometerDecisionListener(
              r, withCache(limiter, props.getDenyCache().isEnabled(), cache.getIfUnique()));
    }
  }

  /** The servlet filter, in a servlet web application. */
  @Configuration(proxyBeanMethods = false)
  @ConditionalOnWebApplication(type = ConditionalOnWebApplication.Type.SERVLET)
  @ConditionalOnClass({Filter.class, OncePerRequestFilter.class})
  @ConditionalOnProperty(prefix = "slidingwindow.filter", name = "enabled", matchIfMissing = true)
  static class Servlet {
    @Bean
    @ConditionalOnMissingBean
    RequestKeyResolver slidingWindowKeyResolver(SlidingWindowProperties props) {
      return SlidingWindowFilter.defaultKeys(props);
    }

    @Bean
    @ConditionalOnMissingBean
    SlidingWindowFilter slidingWindowFilter(
        RateLimiter limiter,
        SlidingWindowProperties props,
        RequestKeyResolver keys,
        ObjectProvider<DecisionListener> listener,
        ObjectProvider<DenyCache> cache) {
      return new SlidingWindowFilter(
          withCache(limiter, props.getDenyCache().isEnabled(), cache.getIfUnique()),
          props,
          keys,
          listener.getIfUnique(() -> DecisionListener.NONE));
    }
  }
}
