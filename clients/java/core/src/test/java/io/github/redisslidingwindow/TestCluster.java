package io.github.redisslidingwindow;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.RedisClient;
import redis.clients.jedis.commands.ProtocolCommand;

/**
 * A cluster of real redis-server 7.0 processes with the module ({@code cluster-enabled yes}, no
 * replicas) on free 127.0.0.1 ports, made by {@code redis-cli --cluster create} and stopped by
 * {@link #close()}. REDIS_CLI overrides the redis-cli binary. Public for the other modules' tests
 * (the core's test-jar).
 */
public final class TestCluster implements AutoCloseable {
  public final List<TestServer> nodes;

  private TestCluster(List<TestServer> nodes) {
    this.nodes = nodes;
  }

  /**
   * Whether this node holds {@code key}: it lists the keys it has in the key's slot (EXISTS would
   * answer MOVED on another node's slot). Listed, not counted: other keys may share the slot.
   */
  public static boolean holds(SendCommand node, String key) {
    Object slot = node.send(List.of("CLUSTER", "KEYSLOT", key));
    Object keys = node.send(List.of("CLUSTER", "GETKEYSINSLOT", String.valueOf(slot), "100000"));
    if (!(keys instanceof List<?> held)) {
      throw new AssertionError("CLUSTER GETKEYSINSLOT: " + keys);
    }
    for (Object k : held) {
      String name =
          k instanceof byte[] b ? new String(b, StandardCharsets.UTF_8) : String.valueOf(k);
      if (name.equals(key)) {
        return true;
      }
    }
    return false;
  }

  /** A port free a moment ago with port + 10000 (its cluster bus) free too. */
  static int freePortPair() throws IOException {
    for (int i = 0; i < 1000; i++) {
      int port = TestServer.freePort();
      if (port > 55535) {
        continue;
      }
      try (ServerSocket s = new ServerSocket()) {
        s.bind(new InetSocketAddress("127.0.0.1", port + 10000));
        return port;
      } catch (IOException busy) {
        // try another
      }
    }
    throw new IOException("no free port pair");
  }

  public static TestCluster start(int masters) throws Exception {
    return start(masters, 0);
  }

  /** {@code masters} primaries, each with {@code replicas} replicas. */
  public static TestCluster start(int masters, int replicas) throws Exception {
    return start(masters, replicas, TestServer.Kind.MODULE);
  }

  /** Of this kind of server (MODULE or LIBRARY_ONLY). */
  public static TestCluster start(int masters, int replicas, TestServer.Kind kind)
      throws Exception {
    List<TestServer> nodes = new ArrayList<>();
    try {
      for (int i = 0; i < masters * (1 + replicas); i++) {
        nodes.add(
            TestServer.start(
                kind,
                freePortPair(),
                List.of(
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "3000")));
      }
      String env = System.getenv("REDIS_CLI");
      List<String> cmd = new ArrayList<>();
      cmd.add(env != null && !env.isEmpty() ? env : "redis-cli");
      cmd.addAll(List.of("--cluster", "create"));
      for (TestServer n : nodes) {
        cmd.add("127.0.0.1:" + n.port);
      }
      cmd.addAll(List.of("--cluster-replicas", Integer.toString(replicas), "--cluster-yes"));
      Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
      String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
      if (!p.waitFor(60, TimeUnit.SECONDS)
          || p.exitValue() != 0
          || !out.contains("All 16384 slots covered")) {
        throw new IllegalStateException("cluster create: " + out);
      }
      TestCluster c = new TestCluster(nodes);
      c.awaitConverged(masters, masters * replicas);
      return c;
    } catch (Exception e) {
      for (TestServer n : nodes) {
        n.close();
      }
      throw e;
    }
  }

  private record Named(String name) implements ProtocolCommand {
    @Override
    public byte[] getRaw() {
      return name.getBytes(StandardCharsets.UTF_8);
    }
  }

  /**
   * Every node says cluster_state:ok and knows every master's slots, and the replicas are linked to
   * their primaries.
   */
  private void awaitConverged(int masters, int replicas) throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
    outer:
    while (true) {
      if (System.nanoTime() > deadline) {
        throw new IllegalStateException("cluster did not converge");
      }
      for (TestServer n : nodes) {
        try (RedisClient c = RedisClient.create("127.0.0.1", n.port)) {
          String info = new String((byte[]) c.sendCommand(new Named("CLUSTER"), "INFO"));
          List<?> slots = (List<?>) c.sendCommand(new Named("CLUSTER"), "SLOTS");
          if (!info.contains("cluster_state:ok") || slots.size() != masters) {
            Thread.sleep(100);
            continue outer;
          }
        }
      }
      int linked = 0;
      for (TestServer n : nodes) {
        try (RedisClient c = RedisClient.create("127.0.0.1", n.port)) {
          String repl = new String((byte[]) c.sendCommand(new Named("INFO"), "replication"));
          if (repl.contains("role:slave") && repl.contains("master_link_status:up")) {
            linked++;
          }
        }
      }
      if (linked != replicas) {
        Thread.sleep(100);
        continue;
      }
      return;
    }
  }

  /** The nodes that are primaries now (ROLE). */
  public List<TestServer> primaries() {
    List<TestServer> out = new ArrayList<>();
    for (TestServer n : nodes) {
      try (RedisClient c = RedisClient.create("127.0.0.1", n.port)) {
        List<?> role = (List<?>) c.sendCommand(new Named("ROLE"));
        if ("master".equals(new String((byte[]) role.get(0), StandardCharsets.UTF_8))) {
          out.add(n);
        }
      }
    }
    return out;
  }

  /** The nodes that are replicas now. */
  public List<TestServer> replicas() {
    List<TestServer> out = new ArrayList<>(nodes);
    out.removeAll(primaries());
    return out;
  }

  Set<HostAndPort> seeds() {
    Set<HostAndPort> s = new HashSet<>();
    for (TestServer n : nodes) {
      s.add(new HostAndPort("127.0.0.1", n.port));
    }
    return s;
  }

  @Override
  public void close() throws InterruptedException {
    for (TestServer n : nodes) {
      n.close();
    }
  }
}
