package io.github.redisslidingwindow;

import java.util.OptionalLong;

/**
 * One limit's verdict. Times are in the call's unit: seconds, or milliseconds when {@code ms}. When
 * {@code degraded} (Redis could not be asked), only {@code allowed} means anything.
 *
 * @param retryAfter -1 when allowed, or never possible (cost greater than the limit); else the
 *     smallest whole number of units after which the same request is allowed
 */
public record LimitResult(
    boolean allowed,
    long count,
    long limit,
    long remaining,
    long retryAfter,
    long resetAfter,
    long window,
    boolean ms,
    boolean degraded) {

  private long inSeconds(long units) {
    return ms ? (units + 999) / 1000 : units;
  }

  /** Whole seconds (rounded up) until the same request is allowed; empty when -1. */
  public OptionalLong retryAfterSeconds() {
    return retryAfter < 0 ? OptionalLong.empty() : OptionalLong.of(inSeconds(retryAfter));
  }

  /** Whole seconds (rounded up) until the estimate is 0 again. */
  public long resetAfterSeconds() {
    return inSeconds(resetAfter);
  }

  /** The window in whole seconds, rounded up, at least 1. */
  public long windowSeconds() {
    return Math.max(1, inSeconds(window));
  }

  /** The placeholder of a call answered without Redis. */
  public static LimitResult unavailable(boolean allowed, long limit, long window, boolean ms) {
    return new LimitResult(allowed, 0, limit, allowed ? limit : 0, -1, 0, window, ms, true);
  }
}
