package io.github.redisslidingwindow.boot;

import io.lettuce.core.api.StatefulConnection;
import io.lettuce.core.api.async.RedisAsyncCommands;
import io.lettuce.core.cluster.api.async.RedisAdvancedClusterAsyncCommands;
import org.springframework.beans.factory.BeanFactory;
import org.springframework.data.redis.connection.RedisConnection;
import org.springframework.data.redis.connection.lettuce.LettuceConnectionFactory;

/**
 * The Lettuce connection of a Spring Data Redis {@link LettuceConnectionFactory} (loaded only when
 * Spring Data Redis is on the classpath): the factory's shared native connection (standalone or
 * cluster) when it shares one (its default), else a dedicated one kept for the limiter.
 */
final class DataRedisConnections {
  private DataRedisConnections() {}

  /** The application's one LettuceConnectionFactory's connector, or null. */
  static LettuceConnector fromFactory(BeanFactory beans) {
    LettuceConnectionFactory f =
        beans.getBeanProvider(LettuceConnectionFactory.class).getIfUnique();
    return f == null ? null : of(f);
  }

  static LettuceConnector of(LettuceConnectionFactory factory) {
    return new LettuceConnector(
        () -> {
          if (factory.getNativeClient() == null) {
            factory.start();
          }
          RedisConnection rc = factory.getConnection();
          Object nativeConnection = rc.getNativeConnection();
          StatefulConnection<?, ?> c;
          if (nativeConnection instanceof RedisAdvancedClusterAsyncCommands<?, ?> cluster) {
            c = cluster.getStatefulConnection();
          } else if (nativeConnection instanceof RedisAsyncCommands<?, ?> standalone) {
            c = standalone.getStatefulConnection();
          } else {
            rc.close();
            throw new IllegalStateException(
                "not a Lettuce standalone or cluster connection: " + nativeConnection);
          }
          // Closing the RedisConnection gives a dedicated connection back and leaves a shared one
          // open (the factory closes it).
          return new LettuceConnector.Opened(c, rc::close);
        },
        null);
  }
}
