package io.github.redisslidingwindow;

import java.util.List;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.function.Consumer;

/**
 * A sliding-window-counter rate limiter on the module or the Functions library.
 *
 * <pre>{@code
 * RateLimiter limiter = RateLimiter.builder(new JedisSendCommand(jedis)).build();
 * LimitResult r = limiter.check("user:42", 100, 60);
 * }</pre>
 *
 * <p>An outage (no reply) answers a degraded placeholder, allowed when fail-open (the default).
 * Errors of configuration and arguments are thrown.
 */
public final class RateLimiter {
  private final SendCommand sender;
  private final String prefix;
  private final boolean failOpen;
  private final Chooser chooser;
  private final Circuit circuit;
  private final DenyCache cache;
  private final long timeoutNanos; // 0: none of its own (the Redis client's timeouts)

  private RateLimiter(Builder b) {
    this.sender = b.sender;
    this.prefix = b.prefix;
    this.failOpen = b.failOpen;
    this.chooser = new Chooser(b.backend);
    this.circuit = new Circuit(b.failOpen, b.probeInterval, b.onError);
    this.cache = b.denyCache;
    this.timeoutNanos = b.timeout == null ? 0 : b.timeout.toNanos();
  }

  private RateLimiter(RateLimiter l, DenyCache cache) {
    this.sender = l.sender;
    this.prefix = l.prefix;
    this.failOpen = l.failOpen;
    this.chooser = l.chooser;
    this.circuit = l.circuit;
    this.cache = cache;
    this.timeoutNanos = l.timeoutNanos;
  }

  /** The deny cache (null when off, the default of a limiter built without one). */
  public DenyCache denyCache() {
    return cache;
  }

  /**
   * This limiter with another deny cache (null: without one): the same connection, backend, circuit
   * and options. The middlewares use it to give a limiter without a cache a default one (and shadow
   * mode none).
   */
  public RateLimiter withDenyCache(DenyCache c) {
    return c == cache ? this : new RateLimiter(this, c);
  }

  /** Whether an outage allows (fail-open). */
  public boolean failsOpen() {
    return failOpen;
  }

  public static Builder builder(SendCommand sender) {
    return new Builder(sender);
  }

  /** The limiter's options. */
  public static final class Builder {
    private final SendCommand sender;
    private String prefix = "rate:";
    private boolean failOpen = true;
    private Backend backend = Backend.AUTO;
    private Consumer<RuntimeException> onError = e -> {};
    private java.time.Duration probeInterval = java.time.Duration.ofSeconds(1);
    private DenyCache denyCache;
    private java.time.Duration timeout;

    private Builder(SendCommand sender) {
      this.sender = Objects.requireNonNull(sender);
    }

    /** The key prefix (default {@code "rate:"}; key = prefix + id). */
    public Builder prefix(String p) {
      this.prefix = Objects.requireNonNull(p);
      return this;
    }

    /** During an outage allow (true, the default) or deny. */
    public Builder failOpen(boolean f) {
      this.failOpen = f;
      return this;
    }

    public Builder backend(Backend b) {
      this.backend = Objects.requireNonNull(b);
      return this;
    }

    /** Called with each outage. */
    public Builder onError(Consumer<RuntimeException> hook) {
      this.onError = Objects.requireNonNull(hook);
      return this;
    }

    /** While Redis is unavailable, one probe per interval (default 1 s); the rest degraded. */
    public Builder probeInterval(java.time.Duration d) {
      if (d.isNegative()) {
        throw new IllegalArgumentException("probe interval must be non-negative");
      }
      this.probeInterval = d;
      return this;
    }

    /**
     * Answers refusals from this cache until Redis could allow the same request (null, the default:
     * every call goes to Redis; the starter's filter and the gateway's limiter give a limiter
     * without one a default {@code new DenyCache()}).
     */
    public Builder denyCache(DenyCache c) {
      this.denyCache = c;
      return this;
    }

    /**
     * A call without a reply within this is an outage (null, the default: the Redis client's own
     * timeouts decide). The limiter enforces it on an {@link AsyncSendCommand} (Lettuce's
     * adapters), sync calls included; a blocking-only {@link SendCommand} such as Jedis' keeps its
     * client's socket timeout: give that one a short timeout instead.
     */
    public Builder timeout(java.time.Duration d) {
      if (d != null && (d.isNegative() || d.isZero())) {
        throw new IllegalArgumentException("timeout must be positive");
      }
      this.timeout = d;
      return this;
    }

    public RateLimiter build() {
      return new RateLimiter(this);
    }
  }

  /** The mode in use (null before the library was looked for). */
  public Mode mode() {
    return chooser.mode();
  }

  private static final Object UNAVAILABLE = new Object();

  /** Whether the circuit is open (Redis unavailable; calls answered without it). */
  public boolean isDown() {
    return circuit.isDown();
  }

  /** The call's reply, or UNAVAILABLE: no reply, or the circuit open. */
  private Object send(Wire w) {
    Circuit.Gate g = circuit.gate();
    if (g != Circuit.Gate.CALL) {
      probeIfDue(g, w);
      return UNAVAILABLE;
    }
    Object reply;
    try {
      reply =
          timeoutNanos > 0 && sender instanceof AsyncSendCommand async
              ? await(chooser.callAsync(async, w))
              : chooser.call(sender, w);
    } catch (RedisUnavailableException e) {
      circuit.failed(e, g);
      return UNAVAILABLE;
    } catch (RuntimeException e) {
      circuit.answered(g);
      throw e;
    }
    circuit.answered(g);
    return reply;
  }

  /** A sync call on an async sender, waited for at most the limiter's timeout. */
  private Object await(CompletableFuture<Object> f) {
    try {
      return f.get(timeoutNanos, java.util.concurrent.TimeUnit.NANOSECONDS);
    } catch (java.util.concurrent.TimeoutException e) {
      f.cancel(false);
      throw noReply(e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new RedisUnavailableException("interrupted while waiting for Redis", e);
    } catch (java.util.concurrent.ExecutionException e) {
      Throwable t = Chooser.unwrap(e.getCause());
      if (t instanceof RuntimeException r) {
        throw r;
      }
      throw new SlidingWindowException(String.valueOf(t), t);
    }
  }

  /** The future with the limiter's timeout, if it has one. */
  private CompletableFuture<Object> timed(CompletableFuture<Object> f) {
    return timeoutNanos > 0
        ? f.orTimeout(timeoutNanos, java.util.concurrent.TimeUnit.NANOSECONDS)
        : f;
  }

  private RedisUnavailableException noReply(Throwable cause) {
    return new RedisUnavailableException(
        "no reply within the limiter's timeout ("
            + java.time.Duration.ofNanos(timeoutNanos).toMillis()
            + " ms)",
        cause);
  }

  /** What a failed future's error is: the limiter's timeout reads as an outage. */
  private Throwable failure(Throwable ex) {
    Throwable t = Chooser.unwrap(ex);
    return t instanceof java.util.concurrent.TimeoutException ? noReply(t) : t;
  }

  /**
   * During an outage, when a probe is due: a PEEK of the call (a COUNTS stays one) sent in the
   * background, which no request waits on, as in every client (conformance/README.md, "Outages"). A
   * probe never counts, or gives back, a request that was answered without Redis.
   */
  private void probeIfDue(Circuit.Gate g, Wire w) {
    if (g != Circuit.Gate.PROBE) {
      return;
    }
    Wire peek =
        w.op() == Op.CHECK || w.op() == Op.REFUND ? new Wire(Op.PEEK, w.key(), w.args()) : w;
    if (sender instanceof AsyncSendCommand async) {
      CompletableFuture<Object> f;
      try {
        f = timed(chooser.callAsync(async, peek));
      } catch (RuntimeException e) {
        f = CompletableFuture.failedFuture(e);
      }
      f.whenComplete((reply, ex) -> probed(ex == null ? null : failure(ex)));
      return;
    }
    Thread t =
        new Thread(
            () -> {
              Throwable failure = null;
              try {
                chooser.call(sender, peek);
              } catch (RuntimeException e) {
                failure = e;
              }
              probed(failure);
            },
            "slidingwindow-probe");
    t.setDaemon(true);
    t.start();
  }

  /** A probe's end: an answer (an error reply too) closes the circuit; an outage keeps it open. */
  private void probed(Throwable failure) {
    if (failure instanceof RedisUnavailableException u) {
      circuit.failed(u, Circuit.Gate.PROBE);
    } else {
      circuit.answered(Circuit.Gate.PROBE);
    }
  }

  String key(String id) {
    return prefix + id;
  }

  private static void validate(List<Limit> limits, CallOptions o) {
    if (limits.isEmpty()) {
      throw new IllegalArgumentException("no limit given");
    }
    if (limits.size() > Rates.MAX_LIMITS) {
      throw new IllegalArgumentException(
          limits.size() + " limits: at most " + Rates.MAX_LIMITS + " per call");
    }
    if (o.cost() < 1) {
      throw new IllegalArgumentException("cost must be at least 1");
    }
    if (o.now() != null && o.now() < 0) {
      throw new IllegalArgumentException("now must be non-negative");
    }
  }

  static List<Limit> rates(String text, CallOptions o) {
    List<Limit> limits = Rates.parseLimits(text);
    if (o.isMs()) {
      throw new RateException(
          RateException.Kind.MS_OPTION,
          "a rate string carries its own unit (ms): give (limit, window) pairs with ms");
    }
    return limits;
  }

  private MultiLimitResult decide(Op op, String id, List<Limit> limits, CallOptions o, boolean ms) {
    validate(limits, o);
    Wire w = Wire.call(op, key(id), limits, o.cost(), ms, o.now(), true);
    java.util.function.Supplier<MultiLimitResult> direct =
        () -> {
          Object reply = send(w);
          if (reply == UNAVAILABLE) {
            return MultiLimitResult.unavailable(failOpen, limits, ms);
          }
          return Replies.decision(reply, limits, o.cost(), ms);
        };
    if (cache == null || op == Op.PEEK) {
      return direct.get();
    }
    if (circuit.isDown()) {
      // During an outage the cache is emptied and bypassed: the circuit answers as without it,
      // and a server that comes back may have lost its counts.
      cache.clear();
      return direct.get();
    }
    DenyCache.Spec s = new DenyCache.Spec(w.key(), limits, ms, o.now(), o.cost());
    return cache.run(s, direct, clock(), op == Op.REFUND);
  }

  private static final List<String> TIME = List.of("TIME");

  /** How the deny cache reads the server's TIME (null on a cluster: no one clock). */
  private java.util.function.Supplier<Object> clock() {
    return sender.isCluster() ? null : () -> sender.send(TIME);
  }

  private java.util.function.Supplier<CompletableFuture<Object>> clockAsync(AsyncSendCommand a) {
    return sender.isCluster() ? null : () -> a.sendAsync(TIME);
  }

  private LimitResult one(Op op, String id, long limit, long window, CallOptions o) {
    return decide(op, id, List.of(new Limit(limit, window)), o, o.isMs()).summary();
  }

  /** Counts the request when allowed. */
  public LimitResult check(String id, long limit, long window) {
    return check(id, limit, window, CallOptions.defaults());
  }

  public LimitResult check(String id, long limit, long window, CallOptions o) {
    return one(Op.CHECK, id, limit, window, o);
  }

  /** The verdict a check would give, counting nothing. */
  public LimitResult peek(String id, long limit, long window) {
    return peek(id, limit, window, CallOptions.defaults());
  }

  public LimitResult peek(String id, long limit, long window, CallOptions o) {
    return one(Op.PEEK, id, limit, window, o);
  }

  /** Gives back {@code cost} from the current window. */
  public LimitResult refund(String id, long limit, long window) {
    return refund(id, limit, window, CallOptions.defaults());
  }

  public LimitResult refund(String id, long limit, long window, CallOptions o) {
    return one(Op.REFUND, id, limit, window, o);
  }

  /**
   * Checks; while denied, sleeps exactly the result's {@code retryAfter} (never past the timeout)
   * and checks again. Returns at once when allowed, never possible, degraded, or out of time (then
   * the last denial). {@code o} gives cost and ms; an explicit now is refused.
   */
  public LimitResult waitFor(
      String id, long limit, long window, java.time.Duration timeout, CallOptions o)
      throws InterruptedException {
    if (timeout.isNegative()) {
      throw new IllegalArgumentException("timeout must be >= 0");
    }
    if (o.now() != null) {
      throw new IllegalArgumentException("waitFor takes no explicit now");
    }
    long deadline = System.nanoTime() + timeout.toNanos();
    for (; ; ) {
      LimitResult r = check(id, limit, window, o);
      long remainingMs = (deadline - System.nanoTime()) / 1_000_000;
      if (r.allowed() || r.degraded() || r.retryAfter() < 0 || remainingMs <= 0) {
        return r;
      }
      Thread.sleep(Math.min(r.retryAfter() * (r.ms() ? 1 : 1000), remainingMs));
    }
  }

  /** Several limits: all must allow, then each counts. */
  public MultiLimitResult checkLimits(String id, List<Limit> limits, CallOptions o) {
    return decide(Op.CHECK, id, limits, o, o.isMs());
  }

  /** A rate string ({@code "10/second;1000/hour"}), sent in milliseconds. */
  public MultiLimitResult checkLimits(String id, String rates, CallOptions o) {
    return decide(Op.CHECK, id, rates(rates, o), o, true);
  }

  public MultiLimitResult peekLimits(String id, List<Limit> limits, CallOptions o) {
    return decide(Op.PEEK, id, limits, o, o.isMs());
  }

  public MultiLimitResult peekLimits(String id, String rates, CallOptions o) {
    return decide(Op.PEEK, id, rates(rates, o), o, true);
  }

  public MultiLimitResult refundLimits(String id, List<Limit> limits, CallOptions o) {
    return decide(Op.REFUND, id, limits, o, o.isMs());
  }

  public MultiLimitResult refundLimits(String id, String rates, CallOptions o) {
    return decide(Op.REFUND, id, rates(rates, o), o, true);
  }

  /** The previous and current window's counts (cost is not used). */
  public WindowCounts counts(String id, long window, CallOptions o) {
    Wire w = Wire.counts(key(id), window, o.isMs(), o.now());
    Object reply = send(w);
    if (reply == UNAVAILABLE) {
      return WindowCounts.unavailable();
    }
    return Replies.counts(reply);
  }

  /** The seed's call: CHECK without DETAILS, {@code [allowed, count]}. */
  public IsAllowedResult isAllowed(String id, long limit, long windowSeconds, Long now) {
    CallOptions o = now == null ? CallOptions.defaults() : CallOptions.defaults().now(now);
    List<Limit> limits = List.of(new Limit(limit, windowSeconds));
    validate(limits, o);
    Wire w = Wire.call(Op.CHECK, key(id), limits, 1, false, o.now(), false);
    Object reply = send(w);
    if (reply == UNAVAILABLE) {
      return new IsAllowedResult(failOpen, 0);
    }
    return Replies.isAllowed(reply);
  }

  /** Deletes the key (and its deny-cache entries); an outage is thrown. */
  public void reset(String id) {
    String key = key(id);
    if (cache != null) {
      cache.forget(key);
    }
    try {
      sender.send(List.of("DEL", key));
    } finally {
      if (cache != null) {
        cache.forget(key);
      }
    }
  }

  // Without blocking: on an AsyncSendCommand (Lettuce's adapters) each call is a future completed
  // by the client's I/O thread; the circuit and the library's detection work as in the blocking
  // calls. Argument errors are thrown at once; the other errors fail the future.

  /** Whether the {@code *Async} calls never block (the sender is an {@link AsyncSendCommand}). */
  public boolean isAsync() {
    return sender instanceof AsyncSendCommand;
  }

  private CompletableFuture<Object> sendAsync(Wire w) {
    if (!(sender instanceof AsyncSendCommand async)) {
      try {
        return CompletableFuture.completedFuture(send(w));
      } catch (RuntimeException e) {
        return CompletableFuture.failedFuture(e);
      }
    }
    Circuit.Gate g = circuit.gate();
    if (g != Circuit.Gate.CALL) {
      probeIfDue(g, w);
      return CompletableFuture.completedFuture(UNAVAILABLE);
    }
    CompletableFuture<Object> f;
    try {
      f = timed(chooser.callAsync(async, w));
    } catch (RuntimeException e) {
      f = CompletableFuture.failedFuture(e);
    }
    return f.handle(
        (reply, ex) -> {
          if (ex == null) {
            circuit.answered(g);
            return reply;
          }
          Throwable t = failure(ex);
          if (t instanceof RedisUnavailableException u) {
            circuit.failed(u, g);
            return UNAVAILABLE;
          }
          circuit.answered(g);
          throw new java.util.concurrent.CompletionException(t);
        });
  }

  private CompletableFuture<MultiLimitResult> decideAsync(
      Op op, String id, List<Limit> limits, CallOptions o, boolean ms) {
    validate(limits, o);
    if (!(sender instanceof AsyncSendCommand async)) {
      try {
        return CompletableFuture.completedFuture(decide(op, id, limits, o, ms));
      } catch (RuntimeException e) {
        return CompletableFuture.failedFuture(e);
      }
    }
    Wire w = Wire.call(op, key(id), limits, o.cost(), ms, o.now(), true);
    java.util.function.Supplier<CompletableFuture<MultiLimitResult>> direct =
        () ->
            sendAsync(w)
                .thenApply(
                    reply ->
                        reply == UNAVAILABLE
                            ? MultiLimitResult.unavailable(failOpen, limits, ms)
                            : Replies.decision(reply, limits, o.cost(), ms));
    if (cache == null || op == Op.PEEK) {
      return direct.get();
    }
    if (circuit.isDown()) {
      cache.clear();
      return direct.get();
    }
    DenyCache.Spec s = new DenyCache.Spec(w.key(), limits, ms, o.now(), o.cost());
    return cache.runAsync(s, direct, clockAsync(async), op == Op.REFUND);
  }

  private CompletableFuture<LimitResult> oneAsync(
      Op op, String id, long limit, long window, CallOptions o) {
    return decideAsync(op, id, List.of(new Limit(limit, window)), o, o.isMs())
        .thenApply(MultiLimitResult::summary);
  }

  /** {@link #check} without blocking. */
  public CompletableFuture<LimitResult> checkAsync(String id, long limit, long window) {
    return checkAsync(id, limit, window, CallOptions.defaults());
  }

  public CompletableFuture<LimitResult> checkAsync(
      String id, long limit, long window, CallOptions o) {
    return oneAsync(Op.CHECK, id, limit, window, o);
  }

  /** {@link #peek} without blocking. */
  public CompletableFuture<LimitResult> peekAsync(
      String id, long limit, long window, CallOptions o) {
    return oneAsync(Op.PEEK, id, limit, window, o);
  }

  /** {@link #refund} without blocking. */
  public CompletableFuture<LimitResult> refundAsync(
      String id, long limit, long window, CallOptions o) {
    return oneAsync(Op.REFUND, id, limit, window, o);
  }

  public CompletableFuture<MultiLimitResult> checkLimitsAsync(
      String id, List<Limit> limits, CallOptions o) {
    return decideAsync(Op.CHECK, id, limits, o, o.isMs());
  }

  public CompletableFuture<MultiLimitResult> checkLimitsAsync(
      String id, String rates, CallOptions o) {
    return decideAsync(Op.CHECK, id, rates(rates, o), o, true);
  }

  public CompletableFuture<MultiLimitResult> peekLimitsAsync(
      String id, List<Limit> limits, CallOptions o) {
    return decideAsync(Op.PEEK, id, limits, o, o.isMs());
  }

  public CompletableFuture<MultiLimitResult> peekLimitsAsync(
      String id, String rates, CallOptions o) {
    return decideAsync(Op.PEEK, id, rates(rates, o), o, true);
  }

  public CompletableFuture<MultiLimitResult> refundLimitsAsync(
      String id, List<Limit> limits, CallOptions o) {
    return decideAsync(Op.REFUND, id, limits, o, o.isMs());
  }

  public CompletableFuture<MultiLimitResult> refundLimitsAsync(
      String id, String rates, CallOptions o) {
    return decideAsync(Op.REFUND, id, rates(rates, o), o, true);
  }

  /** {@link #counts} without blocking. */
  public CompletableFuture<WindowCounts> countsAsync(String id, long window, CallOptions o) {
    Wire w = Wire.counts(key(id), window, o.isMs(), o.now());
    return sendAsync(w)
        .thenApply(
            reply -> reply == UNAVAILABLE ? WindowCounts.unavailable() : Replies.counts(reply));
  }
}
