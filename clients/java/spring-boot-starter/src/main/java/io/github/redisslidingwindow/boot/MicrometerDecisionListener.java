package io.github.redisslidingwindow.boot;

import io.github.redisslidingwindow.DecisionListener;
import io.github.redisslidingwindow.DenyCache;
import io.github.redisslidingwindow.RateLimiter;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.FunctionCounter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The starter's metrics: the counter {@code slidingwindow.requests} with tags {@code policy} and
 * {@code outcome} ({@code allowed}, {@code refused}, {@code degraded}, {@code error}), and the
 * gauge {@code slidingwindow.circuit.open} (1 while Redis is unavailable and calls are answered
 * without it). With a deny cache, the counter {@code slidingwindow.deny_cache.hits} (refusals
 * answered from the cache, without Redis; counted in {@code slidingwindow.requests} as refused too)
 * and the gauge {@code slidingwindow.deny_cache.entries}.
 */
public final class MicrometerDecisionListener implements DecisionListener {
  public static final String REQUESTS = "slidingwindow.requests";
  public static final String CIRCUIT_OPEN = "slidingwindow.circuit.open";
  public static final String DENY_CACHE_HITS = "slidingwindow.deny_cache.hits";
  public static final String DENY_CACHE_ENTRIES = "slidingwindow.deny_cache.entries";

  private final MeterRegistry registry;
  private final Map<String, Counter> counters = new ConcurrentHashMap<>();

  public MicrometerDecisionListener(MeterRegistry registry, RateLimiter limiter) {
    this.registry = registry;
    Gauge.builder(CIRCUIT_OPEN, limiter, l -> l.isDown() ? 1 : 0)
        .description("1 while Redis is unavailable and the limiter answers without it")
        .register(registry);
    DenyCache cache = limiter.denyCache();
    if (cache != null) {
      FunctionCounter.builder(DENY_CACHE_HITS, cache, c -> c.stats().hits())
          .description("refusals answered from the deny cache, without Redis")
          .register(registry);
      Gauge.builder(DENY_CACHE_ENTRIES, cache, c -> c.stats().entries())
          .description("refusals held by the deny cache")
          .register(registry);
    }
  }

  @Override
  public void decided(String policy, Outcome outcome, boolean allowed) {
    String o = outcome.name().toLowerCase(Locale.ROOT);
    counters
        .computeIfAbsent(
            policy + "\u0000" + o,
            k ->
                Counter.builder(REQUESTS)
                    .description("requests decided by the sliding-window rate limiter")
                    .tag("policy", policy)
                    .tag("outcome", o)
                    .register(registry))
        .increment();
  }
}
