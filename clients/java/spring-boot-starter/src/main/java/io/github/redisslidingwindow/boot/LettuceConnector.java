package io.github.redisslidingwindow.boot;

import io.github.redisslidingwindow.AsyncSendCommand;
import io.github.redisslidingwindow.RedisUnavailableException;
import io.github.redisslidingwindow.SendCommand;
import io.github.redisslidingwindow.lettuce.LettuceClusterSendCommand;
import io.github.redisslidingwindow.lettuce.LettuceSendCommand;
import io.lettuce.core.AbstractRedisClient;
import io.lettuce.core.RedisClient;
import io.lettuce.core.api.StatefulConnection;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.cluster.RedisClusterClient;
import io.lettuce.core.cluster.api.StatefulRedisClusterConnection;
import io.lettuce.core.codec.ByteArrayCodec;
import java.time.Duration;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.function.Supplier;
import org.springframework.beans.factory.DisposableBean;

/**
 * The starter's {@link SendCommand}: one Lettuce connection (standalone or cluster), made on the
 * first call rather than at startup (an application starts while Redis is down; a call that cannot
 * connect is an outage, and the next call tries again), then shared by every call.
 */
public final class LettuceConnector implements AsyncSendCommand, DisposableBean {
  /** A connection, and how to give it back (null: nothing to do). */
  record Opened(StatefulConnection<?, ?> connection, Runnable close) {}

  private final Supplier<Opened> connect;
  private final Runnable shutdown;
  private volatile AsyncSendCommand sender;
  private Opened opened;

  LettuceConnector(Supplier<Opened> connect, Runnable shutdown) {
    this.connect = Objects.requireNonNull(connect);
    this.shutdown = shutdown;
  }

  /**
   * Connections of this client (its default URI), each with the command timeout given; {@code
   * owned}: the client is shut down with this bean.
   */
  static LettuceConnector of(AbstractRedisClient client, Duration timeout, boolean owned) {
    Supplier<StatefulConnection<?, ?>> connect;
    if (client instanceof RedisClusterClient c) {
      connect = () -> c.connect(ByteArrayCodec.INSTANCE);
    } else if (client instanceof RedisClient c) {
      connect = () -> c.connect(ByteArrayCodec.INSTANCE);
    } else {
      throw new IllegalArgumentException(
          "not a Lettuce RedisClient or RedisClusterClient: " + client);
    }
    Supplier<Opened> withTimeout =
        () -> {
          StatefulConnection<?, ?> s = connect.get();
          if (timeout != null) {
            s.setTimeout(timeout);
          }
          return new Opened(s, s::close);
        };
    return new LettuceConnector(withTimeout, owned ? client::shutdown : null);
  }

  private synchronized AsyncSendCommand connect() {
    if (sender != null) {
      return sender;
    }
    Opened o;
    try {
      o = connect.get();
    } catch (RuntimeException e) {
      throw new RedisUnavailableException("cannot connect: " + e.getMessage(), e);
    }
    opened = o;
    StatefulConnection<?, ?> c = o.connection();
    if (c instanceof StatefulRedisClusterConnection<?, ?> cc) {
      sender = new LettuceClusterSendCommand(cc);
    } else if (c instanceof StatefulRedisConnection<?, ?> sc) {
      sender = new LettuceSendCommand(sc);
    } else {
      throw new IllegalStateException("not a standalone or cluster connection: " + c);
    }
    return sender;
  }

  @Override
  public CompletableFuture<Object> sendAsync(List<String> command) {
    AsyncSendCommand s = sender;
    if (s != null) {
      return s.sendAsync(command);
    }
    // the first call connects on another thread (Lettuce's connect blocks)
    return CompletableFuture.supplyAsync(this::connect).thenCompose(c -> c.sendAsync(command));
  }

  @Override
  public Object send(List<String> command) {
    AsyncSendCommand s = sender;
    if (s == null) {
      s = connect();
    }
    return s.send(command);
  }

  @Override
  public synchronized void destroy() {
    if (opened != null && opened.close() != null) {
      opened.close().run();
    }
    opened = null;
    sender = null;
    if (shutdown != null) {
      shutdown.run();
    }
  }
}
