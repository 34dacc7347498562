package io.github.redisslidingwindow.lettuce;

import io.github.redisslidingwindow.AsyncSendCommand;
import io.github.redisslidingwindow.RedisErrorReply;
import io.github.redisslidingwindow.RedisUnavailableException;
import io.github.redisslidingwindow.Routing;
import io.github.redisslidingwindow.SendCommand;
import io.lettuce.core.RedisCommandExecutionException;
import io.lettuce.core.RedisException;
import io.lettuce.core.cluster.api.StatefulRedisClusterConnection;
import io.lettuce.core.cluster.models.partitions.RedisClusterNode;
import io.lettuce.core.codec.ByteArrayCodec;
import io.lettuce.core.protocol.CommandArgs;
import io.lettuce.core.protocol.ProtocolKeyword;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;

/**
 * {@link SendCommand} on a Lettuce {@link StatefulRedisClusterConnection} of any codec. A command
 * with a key ({@code FCALL}/{@code EVALSHA}/{@code EVAL} after numkeys, else the first argument) is
 * routed by Lettuce to the primary of the key's slot (the key is sent as the command's key); the
 * keyless commands the limiter sends to find or load its library ({@code FUNCTION ...}, {@code
 * SCRIPT ...}, {@code FCALL_RO slidingwindow_version 0}) go to every primary of the current
 * topology, one after another, and never to a replica (which refuses a write). The first error
 * reply of those is thrown (a primary without the library), else the first primary's reply is
 * returned. The connection is thread-safe and shared by every call. {@link #sendAsync} does the
 * same without blocking (the primaries asked at once).
 */
public final class LettuceClusterSendCommand implements AsyncSendCommand {
  private final StatefulRedisClusterConnection<byte[], byte[]> connection;

  @SuppressWarnings("unchecked")
  public LettuceClusterSendCommand(StatefulRedisClusterConnection<?, ?> connection) {
    // Only CommandArgs.add(String), addKey(byte[]) and AnyOutput are used: the codec never
    // encodes a value of the connection's own types.
    this.connection =
        (StatefulRedisClusterConnection<byte[], byte[]>) Objects.requireNonNull(connection);
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

  private static CommandArgs<byte[], byte[]> args(List<String> command, int keyIndex) {
    CommandArgs<byte[], byte[]> args = new CommandArgs<>(ByteArrayCodec.INSTANCE);
    for (int i = 1; i < command.size(); i++) {
      if (i == keyIndex) {
        args.addKey(command.get(i).getBytes(StandardCharsets.UTF_8));
      } else {
        args.add(command.get(i));
      }
    }
    return args;
  }

  /** The primaries of the topology Lettuce holds now. */
  List<RedisClusterNode> primaries() {
    List<RedisClusterNode> out = new ArrayList<>();
    for (RedisClusterNode n : connection.getPartitions()) {
      if (n.is(RedisClusterNode.NodeFlag.UPSTREAM)) {
        out.add(n);
      }
    }
    return out;
  }

  @Override
  public boolean isCluster() {
    return true;
  }

  @Override
  public Object send(List<String> command) {
    ProtocolKeyword name = new Named(command.get(0).getBytes(StandardCharsets.UTF_8));
    int keyIndex = Routing.keyIndex(command);
    try {
      if (keyIndex >= 0) {
        return connection
            .sync()
            .dispatch(name, new LettuceSendCommand.AnyOutput(), args(command, keyIndex));
      }
      List<RedisClusterNode> primaries = primaries();
      if (primaries.isEmpty()) {
        throw new RedisUnavailableException("the cluster topology has no primary", null);
      }
      Object first = null;
      RedisErrorReply error = null;
      for (int i = 0; i < primaries.size(); i++) {
        RedisClusterNode n = primaries.get(i);
        try {
          Object reply =
              connection
                  .getConnection(n.getNodeId())
                  .sync()
                  .dispatch(name, new LettuceSendCommand.AnyOutput(), args(command, -1));
          if (i == 0) {
            first = reply;
          }
        } catch (RedisCommandExecutionException e) {
          if (error == null) {
            error = new RedisErrorReply(String.valueOf(e.getMessage()), e);
          }
        }
      }
      if (error != null) {
        throw error;
      }
      return first;
    } catch (RedisCommandExecutionException e) {
      throw new RedisErrorReply(String.valueOf(e.getMessage()), e);
    } catch (RedisException e) {
      // refused, reset, closed, timed out, interrupted: no reply
      throw new RedisUnavailableException(String.valueOf(e.getMessage()), e);
    }
  }

  @Override
  public CompletableFuture<Object> sendAsync(List<String> command) {
    ProtocolKeyword name = new Named(command.get(0).getBytes(StandardCharsets.UTF_8));
    int keyIndex = Routing.keyIndex(command);
    try {
      if (keyIndex >= 0) {
        return LettuceSendCommand.mappedAsync(
            connection
                .async()
                .dispatch(name, new LettuceSendCommand.AnyOutput(), args(command, keyIndex))
                .toCompletableFuture());
      }
      List<RedisClusterNode> primaries = primaries();
      if (primaries.isEmpty()) {
        return CompletableFuture.failedFuture(
            new RedisUnavailableException("the cluster topology has no primary", null));
      }
      List<CompletableFuture<Object>> each = new ArrayList<>();
      for (RedisClusterNode n : primaries) {
        each.add(
            LettuceSendCommand.mappedAsync(
                connection
                    .getConnectionAsync(n.getNodeId())
                    .thenCompose(
                        c ->
                            c.async()
                                .dispatch(
                                    name, new LettuceSendCommand.AnyOutput(), args(command, -1))
                                .toCompletableFuture())));
      }
      return CompletableFuture.allOf(each.toArray(new CompletableFuture<?>[0]))
          .handle(
              (ignored, ex) -> {
                // the first error reply, else the first outage, else the first primary's reply
                RuntimeException outage = null;
                for (CompletableFuture<Object> f : each) {
                  if (f.isCompletedExceptionally()) {
                    Throwable t = f.handle((r, e) -> e).join();
                    while (t instanceof CompletionException && t.getCause() != null) {
                      t = t.getCause();
                    }
                    if (t instanceof RedisErrorReply e) {
                      throw new CompletionException(e);
                    }
                    if (outage == null) {
                      outage = LettuceSendCommand.mapped(t);
                    }
                  }
                }
                if (outage != null) {
                  throw new CompletionException(outage);
                }
                return each.get(0).join();
              });
    } catch (RuntimeException e) {
      return CompletableFuture.failedFuture(LettuceSendCommand.mapped(e));
    }
  }
}
