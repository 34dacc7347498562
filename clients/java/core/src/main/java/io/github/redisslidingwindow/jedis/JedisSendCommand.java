package io.github.redisslidingwindow.jedis;

import io.github.redisslidingwindow.RedisErrorReply;
import io.github.redisslidingwindow.RedisUnavailableException;
import io.github.redisslidingwindow.SendCommand;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import redis.clients.jedis.UnifiedJedis;
import redis.clients.jedis.commands.ProtocolCommand;
import redis.clients.jedis.exceptions.JedisConnectionException;
import redis.clients.jedis.exceptions.JedisDataException;

/** {@link SendCommand} on a Jedis {@link UnifiedJedis} (RedisClient, JedisPooled, ...). */
public final class JedisSendCommand implements SendCommand {
  private final UnifiedJedis jedis;

  public JedisSendCommand(UnifiedJedis jedis) {
    this.jedis = Objects.requireNonNull(jedis);
  }

  private record Named(byte[] raw) implements ProtocolCommand {
    @Override
    public byte[] getRaw() {
      return raw;
    }
  }

  @Override
  public Object send(List<String> command) {
    ProtocolCommand name = new Named(command.get(0).getBytes(StandardCharsets.UTF_8));
    String[] args = command.subList(1, command.size()).toArray(new String[0]);
    Object reply;
    try {
      reply = jedis.sendCommand(name, args);
    } catch (JedisConnectionException e) {
      throw new RedisUnavailableException(String.valueOf(e.getMessage()), e);
    } catch (JedisDataException e) {
      throw new RedisErrorReply(String.valueOf(e.getMessage()), e);
    }
    return plain(reply);
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
