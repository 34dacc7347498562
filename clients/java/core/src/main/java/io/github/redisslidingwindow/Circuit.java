package io.github.redisslidingwindow;

import java.time.Duration;
import java.util.function.Consumer;
import java.util.logging.Logger;

/**
 * The outage circuit: after a call without a reply, calls are answered without Redis (degraded)
 * until a probe, one every probe interval, gets an answer.
 */
final class Circuit {
  private static final Logger LOG = Logger.getLogger("slidingwindow");

  enum Gate {
    CALL,
    SKIP,
    PROBE
  }

  private final long probeNanos;
  private final boolean failOpen;
  private final Consumer<RuntimeException> onError;
  private volatile boolean down;
  private boolean probing;
  private long nextProbe;

  Circuit(boolean failOpen, Duration probeInterval, Consumer<RuntimeException> onError) {
    this.failOpen = failOpen;
    this.probeNanos = probeInterval.toNanos();
    this.onError = onError;
  }

  boolean isDown() {
    return down;
  }

  Gate gate() {
    if (!down) {
      return Gate.CALL;
    }
    synchronized (this) {
      if (!down) {
        return Gate.CALL;
      }
      long now = System.nanoTime();
      if (probing || now - nextProbe < 0) {
        return Gate.SKIP;
      }
      probing = true;
      nextProbe = now + probeNanos;
      return Gate.PROBE;
    }
  }

  /** A call without a reply: opens the circuit (once) and tells the hook. */
  void failed(RedisUnavailableException e, Gate g) {
    boolean opened;
    synchronized (this) {
      opened = !down;
      if (opened) {
        down = true;
        nextProbe = System.nanoTime() + probeNanos;
      }
      if (g == Gate.PROBE) {
        probing = false;
      }
    }
    if (opened) {
      LOG.warning(
          "rate limiter: Redis unavailable ("
              + e.getMessage()
              + "); "
              + (failOpen ? "allowing (fail-open)" : "denying (fail-closed)")
              + " requests without asking it until a probe (one every "
              + Duration.ofNanos(probeNanos).toMillis()
              + " ms) gets an answer");
    }
    onError.accept(e);
  }

  /** A call that got an answer (an error reply is an answer too). */
  void answered(Gate g) {
    if (g == Gate.CALL && !down) {
      return;
    }
    synchronized (this) {
      if (g == Gate.PROBE) {
        probing = false;
      }
      if (down) {
        down = false;
        LOG.info("rate limiter: Redis answers again");
      }
    }
  }
}
