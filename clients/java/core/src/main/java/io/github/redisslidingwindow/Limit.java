package io.github.redisslidingwindow;

/** One limit: at most {@code limit} per {@code window} (seconds, or milliseconds with ms). */
public record Limit(long limit, long window) {
  public Limit {
    if (limit < 0 || window < 0) {
      throw new IllegalArgumentException("limit and window must be non-negative");
    }
  }
}
