package io.github.redisslidingwindow;

/**
 * Told of every decision a middleware takes: the Spring Boot starter's servlet filter and the
 * Spring Cloud Gateway limiter (the starter's Micrometer counters are one).
 */
public interface DecisionListener {
  /** What became of a request under a policy. */
  enum Outcome {
    /** Counted and allowed. */
    ALLOWED,
    /** Refused (or, in shadow mode, would have been). */
    REFUSED,
    /** Answered without Redis (an outage): allowed when fail-open, else refused. */
    DEGRADED,
    /** An error other than an outage (configuration, the server's error reply): passed. */
    ERROR
  }

  void decided(String policy, Outcome outcome, boolean allowed);

  /** The outcome of a result. */
  static Outcome outcome(MultiLimitResult r) {
    return r.degraded() ? Outcome.DEGRADED : r.allowed() ? Outcome.ALLOWED : Outcome.REFUSED;
  }

  DecisionListener NONE = (policy, outcome, allowed) -> {};
}
