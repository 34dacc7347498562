package io.github.redisslidingwindow;

/** What COUNTS answered for one window of a key. */
public record WindowCounts(long previous, long current, long elapsed, boolean degraded) {
  /** Zeros, degraded: answered without Redis. */
  public static WindowCounts unavailable() {
    return new WindowCounts(0, 0, 0, true);
  }
}
