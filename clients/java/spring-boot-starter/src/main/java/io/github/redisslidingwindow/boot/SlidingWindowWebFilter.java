package io.github.redisslidingwindow.boot;

import io.github.redisslidingwindow.CallOptions;
import io.github.redisslidingwindow.DecisionListener;
import io.github.redisslidingwindow.Headers;
import io.github.redisslidingwindow.Identity;
import io.github.redisslidingwindow.MultiLimitResult;
import io.github.redisslidingwindow.RateLimiter;
import io.github.redisslidingwindow.TrustedProxies;
import io.github.redisslidingwindow.reactive.ReactiveRateLimiter;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.security.Principal;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.logging.Level;
import java.util.logging.Logger;
import org.springframework.core.Ordered;
import org.springframework.core.io.buffer.DataBuffer;
import org.springframework.http.HttpStatus;
import org.springframework.http.server.PathContainer;
import org.springframework.http.server.reactive.ServerHttpRequest;
import org.springframework.http.server.reactive.ServerHttpResponse;
import org.springframework.web.server.ServerWebExchange;
import org.springframework.web.server.WebFilter;
import org.springframework.web.server.WebFilterChain;
import reactor.core.publisher.Mono;

/**
 * {@link SlidingWindowFilter}'s policies, identity and answers in a reactive (WebFlux) app: each
 * decision through the limiter's async path ({@link ReactiveRateLimiter}), no thread blocked on a
 * Lettuce connection.
 */
public class SlidingWindowWebFilter implements WebFilter, Ordered {
  private static final Logger LOG = Logger.getLogger("slidingwindow");

  private final ReactiveRateLimiter limiter;
  private final List<SlidingWindowFilter.CompiledPolicy> policies;
  private final ReactiveRequestKeyResolver keys;
  private final DecisionListener listener;
  private final SlidingWindowProperties.Filter options;

  public SlidingWindowWebFilter(
      RateLimiter limiter,
      SlidingWindowProperties properties,
      ReactiveRequestKeyResolver keys,
      DecisionListener listener) {
    this.limiter = new ReactiveRateLimiter(Objects.requireNonNull(limiter));
    this.policies = SlidingWindowFilter.compile(properties.getPolicies());
    this.keys = Objects.requireNonNull(keys);
    this.listener = Objects.requireNonNull(listener);
    this.options = properties.getFilter();
  }

  /** The default resolver of {@code slidingwindow.key-source}. */
  static ReactiveRequestKeyResolver defaultKeys(SlidingWindowProperties p) {
    TrustedProxies trusted = TrustedProxies.of(p.getTrustedProxies());
    String header = p.getKeyHeader();
    return switch (p.getKeySource()) {
      case HEADER -> {
        if (header == null || header.isBlank()) {
          throw new IllegalArgumentException(
              "slidingwindow.key-source=header needs slidingwindow.key-header");
        }
        yield exchange -> {
          String v = exchange.getRequest().getHeaders().getFirst(header);
          return v == null || v.isEmpty() ? Mono.empty() : Mono.just("header:" + header + ":" + v);
        };
      }
      case IP -> {
        Identity id = Identity.byIp(trusted).ipv6Prefix(p.getIpv6Prefix());
        yield exchange ->
            Mono.just(
                id.identify(
                    headers(exchange.getRequest(), null), null, peer(exchange.getRequest())));
      }
      case IDENTITY -> {
        Identity base = Identity.create().trustedProxies(trusted).ipv6Prefix(p.getIpv6Prefix());
        Identity id =
            header == null || header.isBlank() ? base : base.apiKey(header, k -> !k.isBlank());
        yield exchange ->
            exchange
                .getPrincipal()
                .map(Principal::getName)
                .map(java.util.Optional::of)
                .defaultIfEmpty(java.util.Optional.empty())
                .map(
                    user ->
                        id.identify(
                            headers(exchange.getRequest(), header),
                            user.orElse(null),
                            peer(exchange.getRequest())));
      }
    };
  }

  private static String peer(ServerHttpRequest r) {
    InetSocketAddress a = r.getRemoteAddress();
    return a == null || a.getAddress() == null ? null : a.getAddress().getHostAddress();
  }

  private static Map<String, List<String>> headers(ServerHttpRequest r, String keyHeader) {
    Map<String, List<String>> h = new HashMap<>();
    List<String> xff = r.getHeaders().get("X-Forwarded-For");
    h.put("x-forwarded-for", xff == null ? List.of() : xff);
    if (keyHeader != null && !keyHeader.isBlank()) {
      List<String> k = r.getHeaders().get(keyHeader);
      h.put(keyHeader.toLowerCase(Locale.ROOT), k == null ? List.of() : k);
    }
    return h;
  }

  @Override
  public int getOrder() {
    return options.getOrder();
  }

  @Override
  public Mono<Void> filter(ServerWebExchange exchange, WebFilterChain chain) {
    if (policies.isEmpty()) {
      return chain.filter(exchange);
    }
    ServerHttpRequest request = exchange.getRequest();
    PathContainer path = request.getPath().pathWithinApplication();
    String method = request.getMethod().name();
    List<SlidingWindowFilter.CompiledPolicy> matching = new ArrayList<>();
    for (SlidingWindowFilter.CompiledPolicy p : policies) {
      if (p.matches(method, path)) {
        matching.add(p);
      }
    }
    if (matching.isEmpty()) {
      return chain.filter(exchange);
    }
    return keys.resolve(exchange)
        .filter(id -> !id.isEmpty())
        .flatMap(id -> decide(exchange, chain, matching, 0, id, Map.of()).thenReturn(true))
        .switchIfEmpty(Mono.defer(() -> chain.filter(exchange).thenReturn(true)))
        .then();
  }

  /** Policy i on, then the next; the first refusal answers. */
  private Mono<Void> decide(
      ServerWebExchange exchange,
      WebFilterChain chain,
      List<SlidingWindowFilter.CompiledPolicy> matching,
      int i,
      String id,
      Map<String, String> headers) {
    if (i == matching.size()) {
      headers.forEach((k, v) -> exchange.getResponse().getHeaders().set(k, v));
      return chain.filter(exchange);
    }
    SlidingWindowFilter.CompiledPolicy p = matching.get(i);
    return limiter
        .checkLimits(p.name() + ":" + id, p.limits(), CallOptions.defaults().ms().cost(p.cost()))
        .map(java.util.Optional::of)
        .onErrorResume(
            e -> {
              LOG.log(Level.WARNING, "rate limiter: policy " + p.name() + " not applied", e);
              listener.decided(p.name(), DecisionListener.Outcome.ERROR, true);
              return Mono.just(java.util.Optional.empty());
            })
        .flatMap(
            o -> {
              if (o.isEmpty()) {
                return decide(exchange, chain, matching, i + 1, id, headers);
              }
              MultiLimitResult r = o.get();
              listener.decided(p.name(), DecisionListener.outcome(r), r.allowed());
              Map<String, String> h =
                  options.isIncludeHeaders() ? Headers.limitsHeaders(r, p.name()) : headers;
              if (!r.allowed() && !options.isShadow()) {
                ServerHttpResponse response = exchange.getResponse();
                h.forEach((k, v) -> response.getHeaders().set(k, v));
                response.setStatusCode(HttpStatus.valueOf(options.getStatusCode()));
                response.getHeaders().set("Content-Type", "text/plain;charset=UTF-8");
                DataBuffer body =
                    response
                        .bufferFactory()
                        .wrap("Too Many Requests\n".getBytes(StandardCharsets.UTF_8));
                return response.writeWith(Mono.just(body));
              }
              return decide(exchange, chain, matching, i + 1, id, h);
            });
  }
}
