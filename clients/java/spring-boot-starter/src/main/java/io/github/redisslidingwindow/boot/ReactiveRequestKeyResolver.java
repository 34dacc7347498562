package io.github.redisslidingwindow.boot;

import org.springframework.web.server.ServerWebExchange;
import reactor.core.publisher.Mono;

/**
 * Who a request is, for the reactive filter ({@link SlidingWindowWebFilter}); empty: not limited.
 * The starter's default follows {@code slidingwindow.key-source}; declare a bean of this type to
 * replace it.
 */
@FunctionalInterface
public interface ReactiveRequestKeyResolver {
  Mono<String> resolve(ServerWebExchange exchange);
}
