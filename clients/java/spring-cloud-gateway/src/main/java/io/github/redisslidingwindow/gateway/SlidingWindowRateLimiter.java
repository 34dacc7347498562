package io.github.redisslidingwindow.gateway;

import io.github.redisslidingwindow.CallOptions;
import io.github.redisslidingwindow.DecisionListener;
import io.github.redisslidingwindow.DenyCache;
import io.github.redisslidingwindow.Headers;
import io.github.redisslidingwindow.Limit;
import io.github.redisslidingwindow.MultiLimitResult;
import io.github.redisslidingwindow.RateLimiter;
import io.github.redisslidingwindow.Rates;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import org.springframework.cloud.gateway.filter.ratelimit.AbstractRateLimiter;
import org.springframework.cloud.gateway.route.RouteDefinitionRouteLocator;
import org.springframework.cloud.gateway.support.ConfigurationService;
import reactor.core.publisher.Mono;
import reactor.core.scheduler.Scheduler;
import reactor.core.scheduler.Schedulers;

/**
 * A Spring Cloud Gateway {@code RateLimiter} for the {@code RequestRateLimiter} filter: a sliding
 * window counter of any window, several limits in one atomic call, a cost per request, and exact
 * {@code Retry-After}.
 *
 * <p>Configured per route under {@value #CONFIGURATION_PROPERTY_NAME}: {@code rates} ({@code
 * 10/second;1000/hour}, as {@link Rates#parseLimits}) and/or {@code limit} with {@code window}
 * (seconds), {@code cost} (default 1), {@code policy} (the name in the draft-11 headers, default
 * the route id), {@code include-headers} (default true). The gateway's own filter settings
 * (key-resolver, deny-empty-key, empty-key-status-code, status-code) apply as with any limiter.
 *
 * <p>The key counted is {@code <route id>:<resolved key>} (a route's limits never mix with
 * another's). On a limiter whose sender is asynchronous (Lettuce's adapters, the starter's
 * connection) each call goes through the limiter's async path and blocks no thread; on another
 * (Jedis) the blocking call runs on {@code Schedulers.boundedElastic()} unless another scheduler is
 * given. An outage answers as the core limiter's circuit says (allowed and degraded by default,
 * without headers; denied with {@code failOpen(false)}). Refusals are answered from a deny cache
 * until Redis could allow the same request again (the core limiter's own, else a default one;
 * {@link #denyCache(DenyCache) denyCache(null)} turns it off).
 */
public class SlidingWindowRateLimiter extends AbstractRateLimiter<SlidingWindowRateLimiter.Config> {
  public static final String CONFIGURATION_PROPERTY_NAME = "sliding-window-rate-limiter";

  private final RateLimiter base;
  private volatile RateLimiter limiter;
  private final Scheduler scheduler;
  private volatile DecisionListener listener = DecisionListener.NONE;

  public SlidingWindowRateLimiter(RateLimiter limiter, ConfigurationService configurationService) {
    this(limiter, configurationService, Schedulers.boundedElastic());
  }

  public SlidingWindowRateLimiter(
      RateLimiter limiter, ConfigurationService configurationService, Scheduler scheduler) {
    super(Config.class, CONFIGURATION_PROPERTY_NAME, configurationService);
    this.base = Objects.requireNonNull(limiter);
    this.limiter = limiter.denyCache() != null ? limiter : limiter.withDenyCache(new DenyCache());
    this.scheduler = Objects.requireNonNull(scheduler);
  }

  /**
   * The deny cache refusals are answered from (null: none, every request goes to Redis). By default
   * the core limiter's own, or a {@code new DenyCache()} when it has none, as the other clients'
   * middlewares do.
   */
  public SlidingWindowRateLimiter denyCache(DenyCache cache) {
    this.limiter = base.withDenyCache(cache);
    return this;
  }

  /**
   * Told of each decision, with the route's policy name (the starter's Micrometer counters, when
   * auto-configured).
   */
  public SlidingWindowRateLimiter listener(DecisionListener l) {
    this.listener = Objects.requireNonNull(l);
    return this;
  }

  /** The core limiter this bean asks (its mode, its circuit, its deny cache). */
  public RateLimiter limiter() {
    return limiter;
  }

  private Config configFor(String routeId) {
    Config c = getConfig().get(routeId);
    if (c == null) {
      c = getConfig().get(RouteDefinitionRouteLocator.DEFAULT_FILTERS);
    }
    if (c == null) {
      throw new IllegalArgumentException(
          "no "
              + CONFIGURATION_PROPERTY_NAME
              + " configuration for route "
              + routeId
              + " (set "
              + CONFIGURATION_PROPERTY_NAME
              + ".rates or .limit and .window in its RequestRateLimiter args)");
    }
    return c;
  }

  @Override
  public Mono<Response> isAllowed(String routeId, String id) {
    Config c;
    List<Limit> limits;
    try {
      c = configFor(routeId);
      limits = c.limits();
    } catch (RuntimeException e) {
      return Mono.error(e);
    }
    String key = routeId + ":" + id;
    String policy = c.getPolicy() != null && !c.getPolicy().isEmpty() ? c.getPolicy() : routeId;
    CallOptions o = CallOptions.defaults().cost(c.getCost()).ms();
    if (limiter.isAsync()) {
      // Lettuce: sent through its async API, nothing blocks. The answer completes on
      // Lettuce's event loop; carrying the gateway's response on from there left some
      // refused requests unanswered under load (make bench-java's hot traffic: a request
      // without an answer in 15 s), so it is handed to Reactor's parallel scheduler.
      return Mono.fromCompletionStage(() -> limiter.checkLimitsAsync(key, limits, o))
          .publishOn(Schedulers.parallel())
          .map(r -> response(r, c, policy));
    }
    return Mono.fromCallable(() -> response(limiter.checkLimits(key, limits, o), c, policy))
        .subscribeOn(scheduler);
  }

  private Response response(MultiLimitResult r, Config c, String policy) {
    listener.decided(policy, DecisionListener.outcome(r), r.allowed());
    Map<String, String> h = c.isIncludeHeaders() ? Headers.limitsHeaders(r, policy) : Map.of();
    return new Response(r.allowed(), h);
  }

  /** A route's limits. */
  public static class Config {
    private String rates;
    private Long limit;
    private Long window;
    private long cost = 1;
    private String policy;
    private boolean includeHeaders = true;

    /**
     * The limits of this route, windows in milliseconds (the call is sent with MS): {@code
     * limit}/{@code window} first, then {@code rates}.
     */
    public List<Limit> limits() {
      List<Limit> out = new ArrayList<>();
      if (limit != null || window != null) {
        if (limit == null || window == null) {
          throw new IllegalArgumentException("limit and window go together");
        }
        if (window <= 0 || window > Long.MAX_VALUE / 1000) {
          throw new IllegalArgumentException("window must be a positive number of seconds");
        }
        out.add(new Limit(limit, window * 1000));
      }
      if (rates != null && !rates.isBlank()) {
        for (Limit r : Rates.parseLimits(rates)) {
          for (Limit o : out) {
            if (o.window() == r.window()) {
              throw new IllegalArgumentException("two limits on one window: " + o + ", " + r);
            }
          }
          out.add(r);
        }
      }
      if (out.isEmpty()) {
        throw new IllegalArgumentException("no limits: set rates, or limit and window");
      }
      return out;
    }

    public String getRates() {
      return rates;
    }

    public Config setRates(String rates) {
      this.rates = rates;
      return this;
    }

    public Long getLimit() {
      return limit;
    }

    public Config setLimit(Long limit) {
      this.limit = limit;
      return this;
    }

    public Long getWindow() {
      return window;
    }

    public Config setWindow(Long window) {
      this.window = window;
      return this;
    }

    public long getCost() {
      return cost;
    }

    public Config setCost(long cost) {
      this.cost = cost;
      return this;
    }

    public String getPolicy() {
      return policy;
    }

    public Config setPolicy(String policy) {
      this.policy = policy;
      return this;
    }

    public boolean isIncludeHeaders() {
      return includeHeaders;
    }

    public Config setIncludeHeaders(boolean includeHeaders) {
      this.includeHeaders = includeHeaders;
      return this;
    }

    @Override
    public String toString() {
      return "Config{rates="
          + rates
          + ", limit="
          + limit
          + ", window="
          + window
          + ", cost="
          + cost
          + ", policy="
          + policy
          + "}";
    }
  }
}
