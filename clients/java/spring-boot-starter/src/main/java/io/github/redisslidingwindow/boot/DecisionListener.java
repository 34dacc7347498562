package io.github.redisslidingwindow.boot;

/** Told of every decision the filter takes (the starter's Micrometer counters are one). */
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

  DecisionListener NONE = (policy, outcome, allowed) -> {};
}
