package io.github.redisslidingwindow;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.DoubleSupplier;
import java.util.function.Supplier;

/**
 * The exact deny cache: a refusal is answered locally until the earliest instant Redis could allow
 * the same request (never early: less 1 ms and 500 ppm of the span), so a flood of refused requests
 * costs Redis one call per identity and wait. Concurrent misses on one key and its limits send one
 * call and wait for it (the single flight). Bounded: at most {@code maxEntries} keys, the least
 * recently used dropped first (in O(1)), waking the calls that waited on them. Safe for concurrent
 * use; share one between limiters on the same Redis only. The rules are {@code
 * conformance/deny_cache.json}'s, the same as the Python, Node and Go clients' caches.
 *
 * <p>Only {@code check} and {@code refund} (and their {@code *Limits} forms) meet it: a peek never
 * does, a refund or {@link RateLimiter#reset} drops the key's entries, allowed and degraded answers
 * are never cached, and while the limiter's circuit is open the cache is emptied and bypassed.
 */
public final class DenyCache {
  /** The default size: keys held. */
  public static final int DEFAULT_MAX_ENTRIES = 10_000;

  /** The default interval between two measurements of the server clock's offset. */
  public static final Duration DEFAULT_CLOCK_REFRESH = Duration.ofSeconds(10);

  private static final double PPM = 500e-6;
  private static final double MARGIN = 0.001;
  private static final long FLIGHT_WAIT_MS = 5_000;
  private static final int CLOCK_SAMPLES = 3;
  private static final int MAX_SLOTS_OF_KEY = 8;
  private static final long BASE = System.nanoTime();

  /** A call as the cache tells calls apart: key, limits, unit, explicit now, cost. */
  record Spec(String key, List<Limit> limits, boolean ms, Long now, long cost) {
    boolean hasNow() {
      return now != null;
    }

    boolean sameSlot(Entry e) {
      return e.ms == ms && e.server == !hasNow() && e.cost == cost && e.limits.equals(limits);
    }
  }

  private static final class Entry {
    final List<Limit> limits;
    final boolean ms;
    final boolean server;
    final long cost;
    final MultiLimitResult result;
    final boolean never;
    double deadline;
    final double origin;
    CompletableFuture<Void> flight;
    int waiters;
    int tickets; // waiters that may go to Redis at once (the quota an allowed answer left)
    int direct; // calls on their way to Redis with a ticket

    Entry(Spec s, MultiLimitResult result, boolean never, double deadline, double origin) {
      this.limits = s.limits();
      this.ms = s.ms();
      this.server = !s.hasNow();
      this.cost = s.cost();
      this.result = result;
      this.never = never;
      this.deadline = deadline;
      this.origin = origin;
    }
  }

  private static final class Held {
    final String key;
    final List<Entry> slots = new ArrayList<>(1);

    Held(String key) {
      this.key = key;
    }
  }

  private record ServerClock(double lo, double hi, double at) {}

  /**
   * The counters: {@code hits} answered without Redis, {@code misses} consulted and sent, {@code
   * stored} refusals remembered, {@code expired} entries that ended, {@code cleared} by a refund, a
   * reset or {@link #forget}, {@code evicted} by the size bound, {@code waits} calls that waited
   * for another call on the same key, {@code entries} held now (limit sets under each key, summed).
   */
  public record Stats(
      long hits,
      long misses,
      long stored,
      long expired,
      long cleared,
      long evicted,
      long waits,
      long entries) {}

  private final int maxEntries;
  private final double clockRefresh; // s; 0: never measured
  private final DoubleSupplier mono; // s, monotonic
  // Insertion order is use order: touch removes and puts again; the first is the least recent.
  private final LinkedHashMap<String, Held> keys = new LinkedHashMap<>();
  private long hits, misses, stored, expired, cleared, evicted, waits;
  private long clears; // bumped by every forget: a call in flight across one stores nothing
  private ServerClock clock;
  private boolean clockBusy;

  /** {@code DenyCache(10000, 10 s)}. */
  public DenyCache() {
    this(DEFAULT_MAX_ENTRIES, DEFAULT_CLOCK_REFRESH);
  }

  /**
   * Holds at most {@code maxEntries} keys (at least 1) and measures the server clock's offset
   * ({@code TIME}, three samples, the narrowest kept) at most once per {@code clockRefresh} for
   * calls in seconds, which lets a seconds refusal last its whole interval ({@link Duration#ZERO}:
   * never; then a seconds refusal lasts {@code retryAfter - 1} seconds). Never measured through a
   * cluster (its nodes need not share a clock).
   */
  public DenyCache(int maxEntries, Duration clockRefresh) {
    this(maxEntries, clockRefresh, () -> (System.nanoTime() - BASE) / 1e9);
  }

  DenyCache(int maxEntries, Duration clockRefresh, DoubleSupplier mono) {
    if (maxEntries < 1) {
      throw new IllegalArgumentException("maxEntries must be at least 1");
    }
    if (clockRefresh.isNegative()) {
      throw new IllegalArgumentException("clockRefresh must be non-negative");
    }
    this.maxEntries = maxEntries;
    this.clockRefresh = clockRefresh.toNanos() / 1e9;
    this.mono = Objects.requireNonNull(mono);
  }

  public int maxEntries() {
    return maxEntries;
  }

  /** Reads the counters. */
  public synchronized Stats stats() {
    long entries = 0;
    for (Held h : keys.values()) {
      entries += h.slots.size();
    }
    return new Stats(hits, misses, stored, expired, cleared, evicted, waits, entries);
  }

  /** Drops the entries of {@code key} (the Redis key: prefix + id), as a refund or reset does. */
  public void forget(String key) {
    List<CompletableFuture<Void>> woken = new ArrayList<>();
    synchronized (this) {
      clears++;
      Held h = keys.remove(key);
      if (h != null) {
        cleared += h.slots.size();
        h.slots.forEach(e -> wake(e, woken));
      }
    }
    complete(woken);
  }

  /** Drops every entry. */
  public void clear() {
    List<CompletableFuture<Void>> woken = new ArrayList<>();
    synchronized (this) {
      clears++;
      for (Held h : keys.values()) {
        h.slots.forEach(e -> wake(e, woken));
      }
      keys.clear();
    }
    complete(woken);
  }

  // -- inside (under the lock; flights are completed after it is released) --

  private static void wake(Entry e, List<CompletableFuture<Void>> woken) {
    if (e.flight != null) {
      woken.add(e.flight);
      e.flight = null;
    }
  }

  private static void complete(List<CompletableFuture<Void>> woken) {
    for (CompletableFuture<Void> f : woken) {
      f.complete(null);
    }
  }

  private void touch(Held h) {
    keys.remove(h.key);
    keys.put(h.key, h);
  }

  private Held hold(String key) {
    Held h = keys.get(key);
    if (h == null) {
      h = new Held(key);
      keys.put(key, h);
    }
    return h;
  }

  private void evict(List<CompletableFuture<Void>> woken) {
    Iterator<Held> it = keys.values().iterator();
    while (keys.size() > maxEntries && it.hasNext()) {
      Held h = it.next();
      it.remove();
      evicted += h.slots.size();
      h.slots.forEach(e -> wake(e, woken));
    }
  }

  private int find(Held h, Spec s) {
    if (h == null) {
      return -1;
    }
    for (int i = 0; i < h.slots.size(); i++) {
      if (s.sameSlot(h.slots.get(i))) {
        return i;
      }
    }
    return -1;
  }

  private static long elapsedUnits(Spec s, double origin, double t) {
    if (s.hasNow()) {
      return s.now() < (long) origin ? 0 : s.now() - (long) origin;
    }
    double secs = Math.max(t - origin, 0);
    return (long) Math.floor(s.ms() ? secs * 1000 : secs);
  }

  private static LimitResult countDownOne(LimitResult x, long cost, long e, boolean summary) {
    long retry = x.retryAfter();
    if (retry > 0) {
      retry -= e;
      if (retry <= 0) {
        retry = summary ? 1 : -1; // the summary never gets there: the entry ends first
      }
    }
    boolean alone = x.allowed() || (retry == -1 && cost <= x.limit());
    return new LimitResult(
        !summary && alone,
        x.count(),
        x.limit(),
        x.remaining(),
        retry,
        Math.max(0, x.resetAfter() - e),
        x.window(),
        x.ms(),
        x.degraded());
  }

  /** The cached answer, its times counted down by the whole units surely elapsed. */
  static MultiLimitResult countDown(MultiLimitResult r, long cost, long e) {
    if (e == 0) {
      return r;
    }
    LimitResult summary = countDownOne(r.summary(), cost, e, true);
    List<LimitResult> each = new ArrayList<>();
    if (r.limits().size() == 1) {
      each.add(summary);
    } else {
      for (LimitResult x : r.limits()) {
        each.add(countDownOne(x, cost, e, false));
      }
    }
    return new MultiLimitResult(summary, each, r.governing());
  }

  /** What {@link #enter} gives a call that goes to Redis with a ticket (in place of a flight). */
  private static final CompletableFuture<Void> TICKET = new CompletableFuture<>();

  /** What a call found: a hit's answer, or the flight it leads (or TICKET), or one to wait for. */
  private record Enter(
      MultiLimitResult hit, CompletableFuture<Void> lead, CompletableFuture<Void> flight) {}

  private static final Enter MISS = new Enter(null, null, null);

  private synchronized Enter enter(Spec s) {
    double t = mono.getAsDouble();
    Held h = keys.get(s.key());
    int i = find(h, s);
    if (i < 0) {
      misses++;
      if (s.hasNow()) {
        return MISS;
      }
      // The first call leads a flight; the calls meanwhile wait for its answer.
      if (h == null) {
        h = hold(s.key());
      } else if (h.slots.size() >= MAX_SLOTS_OF_KEY) {
        Entry gone = h.slots.remove(0);
        if (gone.flight != null) {
          gone.flight.completeAsync(() -> null); // woken off the lock
          gone.flight = null;
        }
      }
      Entry fresh = new Entry(s, null, false, Double.NEGATIVE_INFINITY, t);
      fresh.flight = new CompletableFuture<>();
      h.slots.add(fresh);
      return new Enter(null, fresh.flight, null);
    }
    touch(h);
    Entry e = h.slots.get(i);
    boolean live;
    if (e.never) {
      live = true;
    } else if (s.hasNow()) {
      live = e.origin <= s.now() && s.now() < e.deadline;
    } else {
      live = t < e.deadline;
    }
    if (live && e.result != null) {
      hits++;
      return new Enter(countDown(e.result, s.cost(), elapsedUnits(s, e.origin, t)), null, null);
    }
    if (live || s.hasNow()) {
      misses++;
      return MISS;
    }
    // Ended: what an allowed answer left goes at once, then one call at a time goes to Redis;
    // the others wait for its answer.
    if (e.tickets > 0) {
      e.tickets--;
      e.direct++;
      misses++;
      return new Enter(null, TICKET, null);
    }
    if (e.flight != null) {
      e.waiters++;
      waits++;
      return new Enter(null, null, e.flight);
    }
    if (e.deadline != Double.NEGATIVE_INFINITY) {
      expired++;
      e.deadline = Double.NEGATIVE_INFINITY;
    }
    e.flight = new CompletableFuture<>();
    misses++;
    return new Enter(null, e.flight, null);
  }

  private synchronized void left(Spec s) {
    Held h = keys.get(s.key());
    int i = find(h, s);
    if (i >= 0) {
      Entry e = h.slots.get(i);
      e.waiters = Math.max(e.waiters - 1, 0);
    }
  }

  private synchronized long clears() {
    return clears;
  }

  private boolean wantsClock(Spec s, MultiLimitResult r, boolean canMeasure) {
    if (s.ms() || s.hasNow() || clockRefresh <= 0 || !canMeasure || r.allowed() || r.degraded()) {
      return false;
    }
    synchronized (this) {
      if (clockBusy) {
        return false;
      }
      boolean fresh = clock != null && mono.getAsDouble() - clock.at() < clockRefresh;
      if (!fresh) {
        clockBusy = true;
      }
      return !fresh;
    }
  }

  /** One TIME sample taken between c1 and c2; false when it could not be read. */
  private boolean sample(Object reply, double c1, double c2) {
    long sec;
    long micros;
    try {
      List<?> l = Replies.array(reply, 2, "TIME");
      sec = Replies.integer(l.get(0), "TIME");
      micros = Replies.integer(l.get(1), "TIME");
    } catch (RuntimeException e) {
      return false;
    }
    double serverMs = sec * 1000.0 + micros / 1000.0;
    ServerClock c = new ServerClock(serverMs - c2 * 1000, serverMs - c1 * 1000, c2);
    synchronized (this) {
      ServerClock old = clock;
      boolean keepOld =
          old != null && c.hi() - c.lo() > old.hi() - old.lo() && c2 - old.at() < clockRefresh;
      if (!keepOld) {
        clock = c;
      }
    }
    return true;
  }

  private synchronized void measured() {
    clockBusy = false;
  }

  private void measure(Supplier<Object> time) {
    try {
      for (int i = 0; i < CLOCK_SAMPLES; i++) {
        double c1 = mono.getAsDouble();
        Object v;
        try {
          v = time.get();
        } catch (RuntimeException e) {
          return;
        }
        if (!sample(v, c1, mono.getAsDouble())) {
          return;
        }
      }
    } finally {
      measured();
    }
  }

  private CompletableFuture<Void> measureAsync(Supplier<CompletableFuture<Object>> time, int left) {
    if (left == 0) {
      return CompletableFuture.completedFuture(null);
    }
    double c1 = mono.getAsDouble();
    CompletableFuture<Object> f;
    try {
      f = time.get();
    } catch (RuntimeException e) {
      return CompletableFuture.completedFuture(null);
    }
    return f.handle((v, ex) -> ex == null && sample(v, c1, mono.getAsDouble()))
        .thenCompose(
            ok -> ok ? measureAsync(time, left - 1) : CompletableFuture.completedFuture(null));
  }

  private double deadline(Spec s, MultiLimitResult r, double tSend, ServerClock c) {
    double ra = r.retryAfter();
    if (s.hasNow()) {
      return s.now() + ra;
    }
    if (s.ms()) {
      double span = (ra - 1) / 1000;
      return tSend + span - MARGIN - PPM * span;
    }
    double span = ra - 1;
    double best = tSend + span - MARGIN - PPM * span;
    if (c != null) {
      double age = tSend - c.at();
      double second = Math.floor((tSend * 1000 + c.lo()) / 1000);
      double end = ((second + ra) * 1000 - c.hi()) / 1000;
      double toEnd = end - tSend;
      best = Math.max(best, end - MARGIN - PPM * (toEnd + Math.abs(age)));
    }
    return best;
  }

  private void done(
      Spec s,
      CompletableFuture<Void> led,
      MultiLimitResult r,
      long clearsSeen,
      double tSend,
      double tRecv) {
    List<CompletableFuture<Void>> woken = new ArrayList<>();
    synchronized (this) {
      Held h = keys.get(s.key());
      int i = find(h, s);
      Entry e = i >= 0 ? h.slots.get(i) : null;
      CompletableFuture<Void> lead = led;
      if (lead == TICKET) {
        lead = null;
        if (e != null && e.direct > 0) {
          e.direct--;
        }
      }
      if (lead != null && e != null && e.flight == lead) {
        e.flight = null;
      }
      if (r != null && !r.allowed() && !r.degraded() && clearsSeen == clears) {
        boolean never = r.retryAfter() < 0;
        double dl = never ? Double.POSITIVE_INFINITY : deadline(s, r, tSend, clock);
        double origin = s.hasNow() ? s.now() : tRecv;
        Entry fresh = new Entry(s, r, never, dl, origin);
        if (e != null) {
          // another call's flight (one that is still on its way) goes on
          fresh.flight = e.flight;
          fresh.waiters = e.waiters;
          fresh.direct = e.direct;
        }
        if (h == null) {
          h = hold(s.key());
        }
        if (i >= 0) {
          h.slots.set(i, fresh);
        } else {
          if (h.slots.size() >= MAX_SLOTS_OF_KEY) {
            wake(h.slots.remove(0), woken);
          }
          h.slots.add(fresh);
        }
        touch(h);
        stored++;
        evict(woken);
      } else if (e != null && e.deadline == Double.NEGATIVE_INFINITY) {
        boolean over = r == null || r.degraded() || e.waiters == 0;
        if (lead != null && !over) {
          // Allowed with calls waiting: as many as the quota left go at once (less those on
          // their way already).
          long left = r.summary().remaining() / s.cost() - e.direct;
          e.tickets = (int) Math.max(0, Math.min(e.waiters, left));
        }
        if (over && e.flight == null && e.direct == 0) {
          // allowed with nobody waiting, failed or degraded: nothing to remember
          h.slots.remove(i);
          if (h.slots.isEmpty()) {
            keys.remove(h.key);
          }
        }
      }
      if (lead != null) {
        woken.add(lead);
      }
    }
    complete(woken);
  }

  // -- the calls --

  /**
   * A check or refund through the cache: {@code call} asks Redis (it answers degraded during an
   * outage, or throws), {@code time} sends {@code TIME} (null: the server clock is never measured).
   */
  MultiLimitResult run(
      Spec s, Supplier<MultiLimitResult> call, Supplier<Object> time, boolean refund) {
    if (refund) {
      forget(s.key());
      try {
        return call.get();
      } finally {
        forget(s.key());
      }
    }
    CompletableFuture<Void> lead = null;
    for (; ; ) {
      Enter e = enter(s);
      if (e.hit() != null) {
        return e.hit();
      }
      if (e.flight() == null) {
        lead = e.lead();
        break;
      }
      boolean woke = true;
      try {
        e.flight().get(FLIGHT_WAIT_MS, TimeUnit.MILLISECONDS);
      } catch (TimeoutException x) {
        woke = false;
      } catch (InterruptedException x) {
        Thread.currentThread().interrupt();
        woke = false;
      } catch (ExecutionException x) {
        // never failed: flights are only completed
      }
      left(s);
      if (!woke) {
        break; // to Redis without leading: the lead's flight stays its own
      }
    }
    long clearsSeen = clears();
    double tSend = mono.getAsDouble();
    MultiLimitResult r = null;
    try {
      r = call.get();
      double tRecv = mono.getAsDouble();
      if (wantsClock(s, r, time != null)) {
        measure(time);
      }
      done(s, lead, r, clearsSeen, tSend, tRecv);
      return r;
    } catch (RuntimeException | Error x) {
      done(s, lead, null, clearsSeen, tSend, tSend);
      throw x;
    }
  }

  /** {@link #run} without blocking: waiting for another call's flight blocks no thread. */
  CompletableFuture<MultiLimitResult> runAsync(
      Spec s,
      Supplier<CompletableFuture<MultiLimitResult>> call,
      Supplier<CompletableFuture<Object>> time,
      boolean refund) {
    if (refund) {
      forget(s.key());
      CompletableFuture<MultiLimitResult> f;
      try {
        f = call.get();
      } catch (RuntimeException x) {
        forget(s.key());
        throw x;
      }
      return f.whenComplete((r, x) -> forget(s.key()));
    }
    return attemptAsync(s, call, time, true);
  }

  private CompletableFuture<MultiLimitResult> attemptAsync(
      Spec s,
      Supplier<CompletableFuture<MultiLimitResult>> call,
      Supplier<CompletableFuture<Object>> time,
      boolean consult) {
    CompletableFuture<Void> lead = null;
    if (consult) {
      Enter e = enter(s);
      if (e.hit() != null) {
        return CompletableFuture.completedFuture(e.hit());
      }
      if (e.flight() != null) {
        return e.flight()
            .thenApply(v -> true)
            .completeOnTimeout(false, FLIGHT_WAIT_MS, TimeUnit.MILLISECONDS)
            .thenCompose(
                woke -> {
                  left(s);
                  return attemptAsync(s, call, time, woke);
                });
      }
      lead = e.lead();
    }
    CompletableFuture<Void> led = lead;
    long clearsSeen = clears();
    double tSend = mono.getAsDouble();
    CompletableFuture<MultiLimitResult> f;
    try {
      f = call.get();
    } catch (RuntimeException x) {
      done(s, led, null, clearsSeen, tSend, tSend);
      throw x;
    }
    return f.handle(
            (r, x) -> {
              if (x != null) {
                done(s, led, null, clearsSeen, tSend, tSend);
                return CompletableFuture.<MultiLimitResult>failedFuture(x);
              }
              double tRecv = mono.getAsDouble();
              CompletableFuture<Void> measured =
                  wantsClock(s, r, time != null)
                      ? measureAsync(time, CLOCK_SAMPLES).whenComplete((v, y) -> measured())
                      : CompletableFuture.completedFuture(null);
              return measured.handle(
                  (v, y) -> {
                    done(s, led, r, clearsSeen, tSend, tRecv);
                    return r;
                  });
            })
        .thenCompose(x -> x);
  }
}
