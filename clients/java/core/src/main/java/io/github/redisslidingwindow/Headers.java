package io.github.redisslidingwindow;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * {@code X-RateLimit-*}, {@code Retry-After} and the draft's {@code RateLimit-Policy} / {@code
 * RateLimit} headers of a result. Empty for a degraded result.
 */
public final class Headers {
  private Headers() {}

  /** A structured-field string, or null when the value has a character outside printable ASCII. */
  public static String sfString(String value) {
    for (int i = 0; i < value.length(); i++) {
      char c = value.charAt(i);
      if (c < ' ' || c > '~') {
        return null;
      }
    }
    return "\"" + value.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
  }

  private static String sf(String value) {
    String s = sfString(value);
    return s == null ? "\"default\"" : s;
  }

  /** One RateLimit-Policy item. */
  public static String policyHeader(String name, long limit, long windowSeconds) {
    return sf(name) + ";q=" + limit + ";w=" + windowSeconds;
  }

  private static long moreQuota(LimitResult r) {
    return r.retryAfterSeconds().orElse(r.resetAfterSeconds());
  }

  private static Map<String, String> xHeaders(LimitResult r) {
    Map<String, String> h = new LinkedHashMap<>();
    h.put("X-RateLimit-Limit", Long.toString(r.limit()));
    h.put("X-RateLimit-Remaining", Long.toString(r.remaining()));
    h.put("X-RateLimit-Reset", Long.toString(r.resetAfterSeconds()));
    return h;
  }

  private static Map<String, String> withRetry(Map<String, String> h, LimitResult summary) {
    summary.retryAfterSeconds().ifPresent(s -> h.put("Retry-After", Long.toString(s)));
    return h;
  }

  /** The headers of a one-limit result. */
  public static Map<String, String> rateLimitHeaders(LimitResult r, String policy) {
    if (r.degraded()) {
      return Map.of();
    }
    Map<String, String> h = xHeaders(r);
    h.put("RateLimit-Policy", policyHeader(policy, r.limit(), r.windowSeconds()));
    h.put("RateLimit", sf(policy) + ";r=" + r.remaining() + ";t=" + moreQuota(r));
    return withRetry(h, r);
  }

  /** A limit's name in the draft-11 lists: {@code <policy>/<window>s}, or {@code ms}. */
  public static String limitName(String policy, LimitResult r) {
    if (r.ms() && r.window() % 1000 == 0) {
      return policy + "/" + r.window() / 1000 + "s";
    }
    return policy + "/" + r.window() + (r.ms() ? "ms" : "s");
  }

  /** The headers of a several-limit result (one limit: as {@link #rateLimitHeaders}). */
  public static Map<String, String> limitsHeaders(MultiLimitResult d, String policy) {
    if (d.limits().size() == 1) {
      return rateLimitHeaders(d.summary(), policy);
    }
    if (d.degraded()) {
      return Map.of();
    }
    Map<String, String> h = xHeaders(d.governingResult());
    List<String> policies = new ArrayList<>();
    List<String> states = new ArrayList<>();
    for (LimitResult r : d.limits()) {
      String n = sf(limitName(policy, r));
      policies.add(n + ";q=" + r.limit() + ";w=" + r.windowSeconds());
      states.add(n + ";r=" + r.remaining() + ";t=" + moreQuota(r));
    }
    h.put("RateLimit-Policy", String.join(", ", policies));
    h.put("RateLimit", String.join(", ", states));
    return withRetry(h, d.summary());
  }
}
