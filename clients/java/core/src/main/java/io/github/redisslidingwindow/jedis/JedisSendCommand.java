package io.github.redisslidingwindow.jedis;

import io.github.redisslidingwindow.RedisErrorReply;
import io.github.redisslidingwindow.RedisUnavailableException;
import io.github.redisslidingwindow.Routing;
import io.github.redisslidingwindow.SendCommand;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import redis.clients.jedis.BuilderFactory;
import redis.clients.jedis.CommandArguments;
import redis.clients.jedis.CommandObject;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.RedisClusterClient;
import redis.clients.jedis.UnifiedJedis;
import redis.clients.jedis.commands.ProtocolCommand;
import redis.clients.jedis.exceptions.JedisBroadcastException;
import redis.clients.jedis.exceptions.JedisClusterOperationException;
import redis.clients.jedis.exceptions.JedisConnectionException;
import redis.clients.jedis.exceptions.JedisDataException;

/**
 * {@link SendCommand} on a Jedis {@link UnifiedJedis}: RedisClient, JedisPooled, ... and {@link
 * RedisClusterClient}. On a cluster a command is routed by its key (the key of {@code FCALL}/{@code
 * EVALSHA}/{@code EVAL} after numkeys, else the first argument), and the keyless commands the
 * limiter sends to find or load its library ({@code FUNCTION ...}, {@code SCRIPT ...}, {@code
 * FCALL_RO slidingwindow_version 0}) are broadcast, so each primary gets the library. Jedis 8 sends
 * a broadcast by the command's request policy: {@code FUNCTION LOAD} and {@code FLUSH} ({@code
 * all_shards}) to the primaries only, never to a replica (which would refuse the write;
 * LettuceClusterTest checks the replicas' rejected calls).
 */
public final class JedisSendCommand implements SendCommand {
  private final UnifiedJedis jedis;
  private final RedisClusterClient cluster;

  public JedisSendCommand(UnifiedJedis jedis) {
    this.jedis = Objects.requireNonNull(jedis);
    this.cluster = jedis instanceof RedisClusterClient c ? c : null;
  }

  private record Named(byte[] raw) implements ProtocolCommand {
    @Override
    public byte[] getRaw() {
      return raw;
    }
  }

  static String routingKey(List<String> command) {
    return Routing.key(command);
  }

  @Override
  public boolean isCluster() {
    return cluster != null;
  }

  @Override
  public Object send(List<String> command) {
    ProtocolCommand name = new Named(command.get(0).getBytes(StandardCharsets.UTF_8));
    String[] args = command.subList(1, command.size()).toArray(new String[0]);
    String key = cluster != null ? routingKey(command) : null;
    Object reply;
    try {
      if (cluster == null) {
        reply = jedis.sendCommand(name, args);
      } else if (key != null) {
        reply = jedis.sendCommand(key, name, args);
      } else {
        CommandArguments ca = new CommandArguments(name);
        for (String a : args) {
          ca.add(a);
        }
        reply = cluster.broadcastCommand(new CommandObject<>(ca, BuilderFactory.RAW_OBJECT));
      }
    } catch (JedisConnectionException e) {
      throw new RedisUnavailableException(String.valueOf(e.getMessage()), e);
    } catch (JedisClusterOperationException e) {
      // A cluster call that got no reply within its attempts (a primary stopped: "No more cluster
      // attempts left", "Cluster retry deadline exceeded"): an outage, as a refused connection.
      Throwable cause = e.getCause() != null ? e.getCause() : e;
      throw new RedisUnavailableException(e.getMessage() + ": " + cause.getMessage(), e);
    } catch (JedisBroadcastException e) {
      throw broadcastError(e);
    } catch (JedisDataException e) {
      throw new RedisErrorReply(String.valueOf(e.getMessage()), e);
    }
    return plain(reply);
  }

  /** A node's error reply (a missing library on one primary), else an outage. */
  private static RuntimeException broadcastError(JedisBroadcastException e) {
    RuntimeException outage = null;
    for (Map.Entry<HostAndPort, Object> r : e.getReplies().entrySet()) {
      if (r.getValue() instanceof JedisConnectionException c) {
        outage = new RedisUnavailableException(r.getKey() + ": " + c.getMessage(), e);
      } else if (r.getValue() instanceof JedisDataException d) {
        return new RedisErrorReply(String.valueOf(d.getMessage()), e);
      }
    }
    return outage != null ? outage : new RedisErrorReply(String.valueOf(e.getMessage()), e);
  }

  private static Object plain(Object v) {
    if (v instanceof List<?> l) {
      List<Object> out = new ArrayList<>(l.size());
      for (Object o : l) {
        out.add(plain(o));
      }
      return out;
    }
    if (v instanceof JedisDataException e) {
      throw new RedisErrorReply(String.valueOf(e.getMessage()), e);
    }
    return v;
  }
}
