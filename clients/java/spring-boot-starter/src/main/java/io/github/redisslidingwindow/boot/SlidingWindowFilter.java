package io.github.redisslidingwindow.boot;

import io.github.redisslidingwindow.CallOptions;
import io.github.redisslidingwindow.DecisionListener;
import io.github.redisslidingwindow.DenyCache;
import io.github.redisslidingwindow.Headers;
import io.github.redisslidingwindow.Identity;
import io.github.redisslidingwindow.Limit;
import io.github.redisslidingwindow.MultiLimitResult;
import io.github.redisslidingwindow.RateLimiter;
import io.github.redisslidingwindow.Rates;
import io.github.redisslidingwindow.TrustedProxies;
import jakarta.servlet.FilterChain;
import jakarta.servlet.ServletException;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import java.security.Principal;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.logging.Level;
import java.util.logging.Logger;
import org.springframework.core.Ordered;
import org.springframework.http.server.PathContainer;
import org.springframework.web.filter.OncePerRequestFilter;
import org.springframework.web.util.pattern.PathPattern;
import org.springframework.web.util.pattern.PathPatternParser;

/**
 * A servlet filter applying {@code slidingwindow.policies}: each policy matching a request (its
 * paths and methods) checks its rate string for {@code <policy>:<identity>}, every limit in one
 * atomic call; the first refusal answers 429 (or {@code slidingwindow.filter.status-code}) with
 * {@code Retry-After}, {@code X-RateLimit-*} and the draft's {@code RateLimit-Policy} / {@code
 * RateLimit}, and the request goes no further. An allowed request carries the last policy's
 * headers. An outage answers as the limiter's circuit says (fail-open: passes, without headers);
 * another error (no library and no right to load it, an error reply) is logged and the request
 * passes. Refusals are answered from the limiter's deny cache (a default one when it has none)
 * until Redis could allow again, unless {@code slidingwindow.deny-cache.enabled} is false or the
 * filter is in shadow mode.
 */
public class SlidingWindowFilter extends OncePerRequestFilter implements Ordered {
  private static final Logger LOG = Logger.getLogger("slidingwindow");

  /** A policy as parsed at startup. */
  record CompiledPolicy(
      String name, List<Limit> limits, List<PathPattern> paths, Set<String> methods, long cost) {
    boolean matches(HttpServletRequest request, PathContainer path) {
      if (!methods.isEmpty() && !methods.contains(request.getMethod().toUpperCase(Locale.ROOT))) {
        return false;
      }
      if (paths.isEmpty()) {
        return true;
      }
      for (PathPattern p : paths) {
        if (p.matches(path)) {
          return true;
        }
      }
      return false;
    }
  }

  private final RateLimiter limiter;
  private final List<CompiledPolicy> policies;
  private final RequestKeyResolver keys;
  private final DecisionListener listener;
  private final SlidingWindowProperties.Filter options;

  public SlidingWindowFilter(
      RateLimiter limiter,
      SlidingWindowProperties properties,
      RequestKeyResolver keys,
      DecisionListener listener) {
    // Shadow mode counts every request: it never answers from a deny cache. Otherwise the
    // limiter's own cache when it has one, else a default one (the other clients' middlewares
    // do the same), unless slidingwindow.deny-cache.enabled is false.
    SlidingWindowProperties.DenyCache dc = properties.getDenyCache();
    if (properties.getFilter().isShadow() || !dc.isEnabled()) {
      this.limiter = limiter.withDenyCache(null);
    } else if (limiter.denyCache() == null) {
      this.limiter = limiter.withDenyCache(new DenyCache(dc.getMaxEntries(), dc.getClockRefresh()));
    } else {
      this.limiter = limiter;
    }
    this.policies = compile(properties.getPolicies());
    this.keys = Objects.requireNonNull(keys);
    this.listener = Objects.requireNonNull(listener);
    this.options = properties.getFilter();
  }

  static List<CompiledPolicy> compile(List<SlidingWindowProperties.Policy> policies) {
    List<CompiledPolicy> out = new ArrayList<>();
    Set<String> names = new HashSet<>();
    for (SlidingWindowProperties.Policy p : policies) {
      String name = p.getName();
      if (name == null || name.isBlank()) {
        throw new IllegalArgumentException("slidingwindow.policies: a policy without a name");
      }
      if (!names.add(name)) {
        throw new IllegalArgumentException("slidingwindow.policies: two policies named " + name);
      }
      if (p.getRates() == null || p.getRates().isBlank()) {
        throw new IllegalArgumentException("slidingwindow.policies[" + name + "]: no rates");
      }
      if (p.getCost() < 1) {
        throw new IllegalArgumentException("slidingwindow.policies[" + name + "]: cost < 1");
      }
      List<Limit> limits;
      try {
        limits = Rates.parseLimits(p.getRates());
      } catch (RuntimeException e) {
        throw new IllegalArgumentException(
            "slidingwindow.policies[" + name + "].rates: " + e.getMessage(), e);
      }
      List<PathPattern> paths = new ArrayList<>();
      for (String path : p.getPaths()) {
        paths.add(PathPatternParser.defaultInstance.parse(path));
      }
      Set<String> methods = new HashSet<>();
      for (String m : p.getMethods()) {
        methods.add(m.strip().toUpperCase(Locale.ROOT));
      }
      out.add(new CompiledPolicy(name, limits, paths, methods, p.getCost()));
    }
    return Collections.unmodifiableList(out);
  }

  /** The default resolver of {@code slidingwindow.key-source}. */
  static RequestKeyResolver defaultKeys(SlidingWindowProperties p) {
    TrustedProxies trusted = TrustedProxies.of(p.getTrustedProxies());
    String header = p.getKeyHeader();
    return switch (p.getKeySource()) {
      case HEADER -> {
        if (header == null || header.isBlank()) {
          throw new IllegalArgumentException(
              "slidingwindow.key-source=header needs slidingwindow.key-header");
        }
        yield request -> {
          String v = request.getHeader(header);
          return v == null || v.isEmpty() ? null : "header:" + header + ":" + v;
        };
      }
      case IP -> {
        Identity id = Identity.byIp(trusted).ipv6Prefix(p.getIpv6Prefix());
        yield request -> id.identify(forwarded(request, null), null, request.getRemoteAddr());
      }
      case IDENTITY -> {
        Identity base = Identity.create().trustedProxies(trusted).ipv6Prefix(p.getIpv6Prefix());
        Identity id =
            header == null || header.isBlank() ? base : base.apiKey(header, k -> !k.isBlank());
        yield request -> {
          Principal user = request.getUserPrincipal();
          return id.identify(
              forwarded(request, header),
              user == null ? null : user.getName(),
              request.getRemoteAddr());
        };
      }
    };
  }

  /** The header lines Identity reads: X-Forwarded-For, and the API key header. */
  private static Map<String, List<String>> forwarded(HttpServletRequest r, String keyHeader) {
    Map<String, List<String>> h = new HashMap<>();
    h.put("x-forwarded-for", Collections.list(r.getHeaders("X-Forwarded-For")));
    if (keyHeader != null && !keyHeader.isBlank()) {
      h.put(keyHeader.toLowerCase(Locale.ROOT), Collections.list(r.getHeaders(keyHeader)));
    }
    return h;
  }

  @Override
  public int getOrder() {
    return options.getOrder();
  }

  private static PathContainer path(HttpServletRequest request) {
    String uri = request.getRequestURI();
    String context = request.getContextPath();
    if (context != null && !context.isEmpty() && uri.startsWith(context)) {
      uri = uri.substring(context.length());
    }
    return PathContainer.parsePath(uri.isEmpty() ? "/" : uri);
  }

  @Override
  protected void doFilterInternal(
      HttpServletRequest request, HttpServletResponse response, FilterChain chain)
      throws ServletException, IOException {
    if (policies.isEmpty()) {
      chain.doFilter(request, response);
      return;
    }
    PathContainer path = path(request);
    String identity = null;
    boolean resolved = false;
    Map<String, String> headers = Map.of();
    for (CompiledPolicy p : policies) {
      if (!p.matches(request, path)) {
        continue;
      }
      if (!resolved) {
        identity = keys.resolve(request);
        resolved = true;
      }
      if (identity == null || identity.isEmpty()) {
        break;
      }
      MultiLimitResult r;
      try {
        r =
            limiter.checkLimits(
                p.name() + ":" + identity, p.limits(), CallOptions.defaults().ms().cost(p.cost()));
      } catch (RuntimeException e) {
        LOG.log(Level.WARNING, "rate limiter: policy " + p.name() + " not applied", e);
        listener.decided(p.name(), DecisionListener.Outcome.ERROR, true);
        continue;
      }
      listener.decided(p.name(), DecisionListener.outcome(r), r.allowed());
      if (options.isIncludeHeaders()) {
        headers = Headers.limitsHeaders(r, p.name());
      }
      if (!r.allowed() && !options.isShadow()) {
        headers.forEach(response::setHeader);
        response.setStatus(options.getStatusCode());
        response.setContentType("text/plain;charset=UTF-8");
        response.getWriter().write("Too Many Requests\n");
        return;
      }
    }
    headers.forEach(response::setHeader);
    chain.doFilter(request, response);
  }
}
