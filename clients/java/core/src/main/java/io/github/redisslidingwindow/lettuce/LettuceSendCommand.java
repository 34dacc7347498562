package io.github.redisslidingwindow.lettuce;

import io.github.redisslidingwindow.AsyncSendCommand;
import io.github.redisslidingwindow.RedisErrorReply;
import io.github.redisslidingwindow.RedisUnavailableException;
import io.github.redisslidingwindow.SendCommand;
import io.lettuce.core.RedisCommandExecutionException;
import io.lettuce.core.RedisException;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.codec.ByteArrayCodec;
import io.lettuce.core.output.CommandOutput;
import io.lettuce.core.protocol.CommandArgs;
import io.lettuce.core.protocol.ProtocolKeyword;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;

/**
 * {@link SendCommand} on a standalone Lettuce {@link StatefulRedisConnection} of any codec (the
 * command is sent as raw strings, the reply read by an output of its own: bulk and status replies
 * as {@code byte[]}, integers as {@code Long}, arrays as {@code List}, as the Jedis adapter). RESP2
 * and RESP3 both work (a RESP3 map is flattened to key, value, ...). The connection is thread-safe
 * and shared by every call. {@link #sendAsync} dispatches through {@code connection.async()}: the
 * limiter's {@code *Async} calls never block.
 */
public final class LettuceSendCommand implements AsyncSendCommand {
  private final StatefulRedisConnection<byte[], byte[]> connection;

  @SuppressWarnings("unchecked")
  public LettuceSendCommand(StatefulRedisConnection<?, ?> connection) {
    // Only CommandArgs.add(String) and the output below are used: the codec never encodes.
    this.connection = (StatefulRedisConnection<byte[], byte[]>) Objects.requireNonNull(connection);
  }

  private record Named(byte[] bytes) implements ProtocolKeyword {
    @Override
    public byte[] getBytes() {
      return bytes;
    }

    @Override
    public String toString() {
      return new String(bytes, StandardCharsets.UTF_8);
    }
  }

  private static CommandArgs<byte[], byte[]> args(List<String> command) {
    CommandArgs<byte[], byte[]> args = new CommandArgs<>(ByteArrayCodec.INSTANCE);
    for (String a : command.subList(1, command.size())) {
      args.add(a);
    }
    return args;
  }

  @Override
  public Object send(List<String> command) {
    ProtocolKeyword name = new Named(command.get(0).getBytes(StandardCharsets.UTF_8));
    try {
      return connection.sync().dispatch(name, new AnyOutput(), args(command));
    } catch (RuntimeException e) {
      throw mapped(e);
    }
  }

  @Override
  public CompletableFuture<Object> sendAsync(List<String> command) {
    ProtocolKeyword name = new Named(command.get(0).getBytes(StandardCharsets.UTF_8));
    CompletableFuture<Object> f;
    try {
      f = connection.async().dispatch(name, new AnyOutput(), args(command)).toCompletableFuture();
    } catch (RuntimeException e) {
      return CompletableFuture.failedFuture(mapped(e));
    }
    return mappedAsync(f);
  }

  /** The future's Lettuce errors as the limiter's. */
  static CompletableFuture<Object> mappedAsync(CompletableFuture<Object> f) {
    return f.handle(
        (reply, ex) -> {
          if (ex == null) {
            return reply;
          }
          Throwable t = ex;
          while (t instanceof CompletionException && t.getCause() != null) {
            t = t.getCause();
          }
          throw new CompletionException(mapped(t));
        });
  }

  /**
   * An error reply as {@link RedisErrorReply}; refused, reset, closed, timed out, interrupted (no
   * reply) as {@link RedisUnavailableException}; anything else as it is.
   */
  static RuntimeException mapped(Throwable e) {
    if (e instanceof RedisCommandExecutionException x) {
      return new RedisErrorReply(String.valueOf(x.getMessage()), x);
    }
    if (e instanceof RedisException x) {
      return new RedisUnavailableException(String.valueOf(x.getMessage()), x);
    }
    if (e instanceof java.util.concurrent.CancellationException x) {
      return new RedisUnavailableException("cancelled", x);
    }
    return e instanceof RuntimeException r
        ? r
        : new RedisUnavailableException(String.valueOf(e), e);
  }

  /** Any reply, nested arrays included, as plain Java values. */
  static final class AnyOutput extends CommandOutput<byte[], byte[], Object> {
    private static final class Open {
      final List<Object> list;
      int left;

      Open(int n) {
        list = new ArrayList<>(n);
        left = n;
      }
    }

    private final Deque<Open> open = new ArrayDeque<>();

    AnyOutput() {
      super(ByteArrayCodec.INSTANCE, null);
    }

    private void add(Object v) {
      while (true) {
        Open top = open.peek();
        if (top == null) {
          output = v;
          return;
        }
        top.list.add(v);
        if (--top.left > 0) {
          return;
        }
        open.pop();
        v = top.list;
      }
    }

    @Override
    public void set(ByteBuffer bytes) {
      if (bytes == null) {
        add(null);
        return;
      }
      byte[] b = new byte[bytes.remaining()];
      bytes.get(b);
      add(b);
    }

    @Override
    public void setSingle(ByteBuffer bytes) {
      set(bytes);
    }

    @Override
    public void setBigNumber(ByteBuffer bytes) {
      set(bytes);
    }

    @Override
    public void set(long integer) {
      add(integer);
    }

    @Override
    public void set(double number) {
      add(Double.toString(number).getBytes(StandardCharsets.UTF_8));
    }

    @Override
    public void set(boolean value) {
      add(value ? 1L : 0L);
    }

    @Override
    public void multi(int count) {
      if (count < 0) {
        add(null);
      } else if (count == 0) {
        add(new ArrayList<>());
      } else {
        open.push(new Open(count));
      }
    }

    @Override
    public void multiArray(int count) {
      multi(count);
    }

    @Override
    public void multiSet(int count) {
      multi(count);
    }

    @Override
    public void multiPush(int count) {
      multi(count);
    }

    @Override
    public void multiMap(int count) {
      multi(count < 0 ? count : count * 2);
    }
  }
}
