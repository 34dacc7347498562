package io.github.redisslidingwindow;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.redisslidingwindow.lettuce.LettuceSendCommand;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.codec.ByteArrayCodec;
import java.util.EnumMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/** The limiter through Lettuce (one shared connection) on the module and library-only servers. */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class LettuceLiveTest {
  enum Kind {
    MODULE(TestServer.Kind.MODULE, Mode.MODULE),
    LIBRARY_ONLY(TestServer.Kind.LIBRARY_ONLY, Mode.FUNCTION);

    final TestServer.Kind server;
    final Mode mode;

    Kind(TestServer.Kind server, Mode mode) {
      this.server = server;
      this.mode = mode;
    }
  }

  private final Map<Kind, TestServer> servers = new EnumMap<>(Kind.class);
  private final Map<Kind, RedisClient> clients = new EnumMap<>(Kind.class);
  private final Map<Kind, StatefulRedisConnection<?, ?>> connections = new EnumMap<>(Kind.class);

  @BeforeAll
  void start() throws Exception {
    for (Kind k : Kind.values()) {
      TestServer s = TestServer.start(k.server);
      servers.put(k, s);
      RedisClient c = RedisClient.create(RedisURI.create("127.0.0.1", s.port));
      clients.put(k, c);
      // the module server through a String codec, the library one through byte[]
      connections.put(k, k == Kind.MODULE ? c.connect() : c.connect(ByteArrayCodec.INSTANCE));
    }
  }

  @AfterAll
  void stop() throws Exception {
    for (StatefulRedisConnection<?, ?> c : connections.values()) {
      c.close();
    }
    for (RedisClient c : clients.values()) {
      c.shutdown();
    }
    for (TestServer s : servers.values()) {
      s.close();
    }
  }

  private RateLimiter limiter(Kind k) {
    return RateLimiter.builder(new LettuceSendCommand(connections.get(k))).build();
  }

  private static String id() {
    return "java-lettuce:" + UUID.randomUUID();
  }

  @Test
  void repliesAsPlainValues() {
    SendCommand send = new LettuceSendCommand(connections.get(Kind.MODULE));
    String key = id();
    assertEquals(1L, send.send(List.of("RPUSH", key, "a")));
    send.send(List.of("RPUSH", key, "b"));
    Object range = send.send(List.of("LRANGE", key, "0", "-1"));
    List<?> l = assertInstanceOf(List.class, range);
    assertEquals("a", new String((byte[]) l.get(0), java.nio.charset.StandardCharsets.UTF_8));
    assertEquals(List.of(), send.send(List.of("LRANGE", id(), "0", "-1")));
    assertEquals(null, send.send(List.of("GET", id())));
    RedisErrorReply e = assertThrows(RedisErrorReply.class, () -> send.send(List.of("INCR", key)));
    assertEquals("WRONGTYPE", e.code());
  }

  @Test
  void closedConnectionIsAnOutageAnsweredDegraded() {
    StatefulRedisConnection<String, String> c = clients.get(Kind.MODULE).connect();
    RateLimiter l = RateLimiter.builder(new LettuceSendCommand(c)).build();
    assertTrue(l.check(id(), 3, 3600).allowed());
    c.close();
    assertThrows(
        RedisUnavailableException.class,
        () -> new LettuceSendCommand(c).send(List.of("PING")),
        "no reply is RedisUnavailableException");
    LimitResult r = l.check(id(), 3, 3600);
    assertTrue(r.degraded(), "fail-open placeholder: " + r);
    assertTrue(r.allowed());
  }

  @ParameterizedTest
  @EnumSource(Kind.class)
  void checkPeekRefundCounts(Kind k) {
    LiveChecks.checkPeekRefundCounts(limiter(k), id(), k.mode, k.toString());
  }

  @ParameterizedTest
  @EnumSource(Kind.class)
  void severalLimits(Kind k) {
    LiveChecks.severalLimits(limiter(k), id());
  }

  @ParameterizedTest
  @EnumSource(Kind.class)
  void fiftyThreadsGetExactlyTheLimit(Kind k) throws Exception {
    LiveChecks.fiftyThreadsGetExactlyTheLimit(limiter(k), id(), k.toString());
  }
}
