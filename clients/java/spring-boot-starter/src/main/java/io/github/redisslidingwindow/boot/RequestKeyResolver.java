package io.github.redisslidingwindow.boot;

import jakarta.servlet.http.HttpServletRequest;

/**
 * Who a request is, as the identity the filter counts it by; null or empty: not limited. The
 * starter's default follows {@code slidingwindow.key-source}; declare a bean of this type to
 * replace it.
 */
@FunctionalInterface
public interface RequestKeyResolver {
  String resolve(HttpServletRequest request);
}
