package io.github.redisslidingwindow;

/** A call's options: cost (default 1), ms (default false), now (default: the server's clock). */
public final class CallOptions {
  private static final CallOptions DEFAULTS = new CallOptions(1, false, null);

  private final long cost;
  private final boolean ms;
  private final Long now;

  private CallOptions(long cost, boolean ms, Long now) {
    this.cost = cost;
    this.ms = ms;
    this.now = now;
  }

  public static CallOptions defaults() {
    return DEFAULTS;
  }

  /** The request's weight, at least 1. */
  public CallOptions cost(long c) {
    return new CallOptions(c, ms, now);
  }

  /** Windows and times in milliseconds. */
  public CallOptions ms() {
    return new CallOptions(cost, true, now);
  }

  public CallOptions ms(boolean m) {
    return new CallOptions(cost, m, now);
  }

  /** An explicit time (seconds, or ms with ms) instead of the server's clock. */
  public CallOptions now(long t) {
    return new CallOptions(cost, ms, t);
  }

  public long cost() {
    return cost;
  }

  public boolean isMs() {
    return ms;
  }

  /** The explicit time, or null. */
  public Long now() {
    return now;
  }
}
