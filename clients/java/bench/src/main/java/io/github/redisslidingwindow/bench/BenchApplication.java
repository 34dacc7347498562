package io.github.redisslidingwindow.bench;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.context.ConfigurableApplicationContext;
import reactor.core.publisher.Mono;
import reactor.netty.DisposableServer;
import reactor.netty.http.server.HttpServer;

/**
 * One Spring Cloud Gateway in front of an upstream in the same JVM, behind one rate limiter, for
 * the load generator of {@code make bench} (bench/harness): {@code java -jar
 * slidingwindow-bench.jar <variant> <redis host:port> <limit> <window seconds> [log]}.
 *
 * <p>It prints {@code PORT <n>} as its first line on stdout once the gateway listens on 127.0.0.1
 * (everything else goes to stderr), then serves until killed. {@code GET /} with an {@code X-Id}
 * header is one request of that identity: 200 {@code ok} from the upstream when allowed, 429 with
 * {@code Retry-After} (whole seconds) when refused.
 *
 * <p>Variants: {@code none} (no limiter), {@code slidingwindow} (our {@code
 * SlidingWindowRateLimiter}, limit per window, its defaults), {@code redis} (the gateway's own
 * {@code RedisRateLimiter}, see {@link #redisRateLimiterArgs}) and {@code bucket4j} (bucket4j's
 * Lettuce proxy manager, see {@link Bucket4jRateLimiter}). With {@code log}, {@code GET
 * /__decisions} gives every decision as the Go apps do.
 */
@SpringBootApplication
public class BenchApplication {
  public static final List<String> VARIANTS = List.of("none", "slidingwindow", "redis", "bucket4j");

  /** The route's id (our limiter's keys start with it). */
  static final String ROUTE = "bench";

  private static final String ROUTES = "spring.cloud.gateway.server.webflux.routes[0].";

  /** A running gateway and its upstream. */
  public record Running(ConfigurableApplicationContext context, DisposableServer upstream, int port)
      implements AutoCloseable {
    @Override
    public void close() {
      context.close();
      upstream.disposeNow();
    }
  }

  public static void main(String[] args) {
    if (args.length < 4 || args.length > 5 || (args.length == 5 && !args[4].equals("log"))) {
      System.err.println(
          "usage: java -jar slidingwindow-bench.jar <"
              + String.join("|", VARIANTS)
              + "> <redis host:port> <limit> <window seconds> [log]");
      System.exit(2);
    }
    Running r;
    try {
      r =
          start(
              args[0], args[1], Long.parseLong(args[2]), Long.parseLong(args[3]), args.length == 5);
    } catch (RuntimeException e) {
      System.err.println("bench app: " + e);
      System.exit(1);
      return;
    }
    System.out.println("PORT " + r.port());
    System.out.flush();
  }

  /** The upstream and the gateway in front of it, both on free 127.0.0.1 ports. */
  public static Running start(String variant, String redis, long limit, long window, boolean log) {
    if (!VARIANTS.contains(variant)) {
      throw new IllegalArgumentException(
          "unknown variant " + variant + " (one of " + VARIANTS + ")");
    }
    if (limit <= 0 || window <= 0) {
      throw new IllegalArgumentException("limit and window must be positive");
    }
    int colon = redis.lastIndexOf(':');
    if (colon <= 0) {
      throw new IllegalArgumentException("redis address " + redis + " is not host:port");
    }
    String host = redis.substring(0, colon);
    int redisPort = Integer.parseInt(redis.substring(colon + 1));
    DisposableServer upstream =
        HttpServer.create()
            .host("127.0.0.1")
            .port(0)
            .handle(
                (req, res) -> res.header("Content-Type", "text/plain").sendString(Mono.just("ok")))
            .bindNow();
    try {
      SpringApplication app = new SpringApplication(BenchApplication.class);
      app.setWebApplicationType(WebApplicationType.REACTIVE);
      app.setDefaultProperties(
          properties(variant, host, redisPort, limit, window, upstream.port(), log));
      ConfigurableApplicationContext ctx = app.run();
      int port = Integer.parseInt(ctx.getEnvironment().getProperty("local.server.port"));
      return new Running(ctx, upstream, port);
    } catch (RuntimeException e) {
      upstream.disposeNow();
      throw e;
    }
  }

  /** The gateway's settings: one route, / and all below it to the upstream, with the limiter. */
  static Map<String, Object> properties(
      String variant,
      String redisHost,
      int redisPort,
      long limit,
      long window,
      int upstreamPort,
      boolean log) {
    Map<String, Object> p = new LinkedHashMap<>();
    p.put("server.address", "127.0.0.1");
    p.put("server.port", "0");
    p.put("spring.main.banner-mode", "off");
    p.put("bench.variant", variant);
    p.put("bench.limit", Long.toString(limit));
    p.put("bench.window", Long.toString(window));
    p.put("bench.log", Boolean.toString(log));
    p.put("bench.redis-host", redisHost);
    p.put("bench.redis-port", Integer.toString(redisPort));
    // RedisRateLimiter's client: Spring Data Redis (Lettuce, one shared connection)
    p.put("spring.data.redis.host", redisHost);
    p.put("spring.data.redis.port", Integer.toString(redisPort));
    p.put(ROUTES + "id", ROUTE);
    p.put(ROUTES + "uri", "http://127.0.0.1:" + upstreamPort);
    p.put(ROUTES + "predicates[0]", "Path=/**");
    if (variant.equals("none")) {
      return p;
    }
    String f = ROUTES + "filters[0].";
    p.put(f + "name", "RequestRateLimiter");
    p.put(f + "args.key-resolver", "#{@idKeyResolver}");
    List<String[]> args = new ArrayList<>();
    switch (variant) {
      case "slidingwindow" -> {
        p.put(f + "args.rate-limiter", "#{@slidingWindowRateLimiter}");
        args.add(new String[] {"sliding-window-rate-limiter.limit", Long.toString(limit)});
        args.add(new String[] {"sliding-window-rate-limiter.window", Long.toString(window)});
      }
      case "redis" -> {
        int[] r = redisRateLimiterArgs(limit, window);
        p.put(f + "args.rate-limiter", "#{@redisRateLimiter}");
        args.add(new String[] {"redis-rate-limiter.replenishRate", Integer.toString(r[0])});
        args.add(new String[] {"redis-rate-limiter.burstCapacity", Integer.toString(r[1])});
        args.add(new String[] {"redis-rate-limiter.requestedTokens", Integer.toString(r[2])});
      }
      case "bucket4j" -> {
        p.put(f + "args.rate-limiter", "#{@bucket4jRateLimiter}");
        args.add(new String[] {"bucket4j-rate-limiter.limit", Long.toString(limit)});
        args.add(new String[] {"bucket4j-rate-limiter.window", Long.toString(window)});
      }
      default -> throw new IllegalArgumentException(variant);
    }
    for (String[] a : args) {
      p.put(f + "args." + a[0], a[1]);
    }
    return p;
  }

  /**
   * RedisRateLimiter's settings for "limit per window seconds": {replenishRate, burstCapacity,
   * requestedTokens}. It is a token bucket in whole tokens per second, so each request costs {@code
   * requestedTokens = window / g} tokens with {@code g = gcd(limit, window)}: the bucket holds
   * {@code burstCapacity = limit * requestedTokens} tokens (limit requests) and refills at {@code
   * replenishRate = limit / g} tokens per second (limit requests per window), both whole. E.g. 3
   * per 60 s is (1, 60, 20) and 100 per 1 s is (100, 100, 1). A full bucket lets limit requests
   * through at once and then limit per window more: up to twice the limit in one window.
   */
  static int[] redisRateLimiterArgs(long limit, long window) {
    long g = gcd(limit, window);
    long requested = window / g;
    long replenish = limit / g;
    long burst;
    try {
      burst = Math.multiplyExact(limit, requested);
    } catch (ArithmeticException e) {
      burst = Long.MAX_VALUE;
    }
    if (burst > Integer.MAX_VALUE) {
      throw new IllegalArgumentException(
          limit + " per " + window + " s does not fit RedisRateLimiter's int settings");
    }
    return new int[] {(int) replenish, (int) burst, (int) requested};
  }

  private static long gcd(long a, long b) {
    while (b != 0) {
      long t = a % b;
      a = b;
      b = t;
    }
    return a;
  }
}
