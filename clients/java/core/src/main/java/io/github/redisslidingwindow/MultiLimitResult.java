package io.github.redisslidingwindow;

import java.util.ArrayList;
import java.util.List;

/**
 * A decision on one or several limits. {@code summary} is the reply's head, {@code limits} each
 * limit's own verdict in call order, {@code governing} the index of the limit the summary speaks
 * for.
 */
public record MultiLimitResult(LimitResult summary, List<LimitResult> limits, int governing) {
  public MultiLimitResult {
    limits = List.copyOf(limits);
  }

  public boolean allowed() {
    return summary.allowed();
  }

  public boolean degraded() {
    return summary.degraded();
  }

  public boolean ms() {
    return summary.ms();
  }

  public long retryAfter() {
    return summary.retryAfter();
  }

  public LimitResult governingResult() {
    return limits.get(governing);
  }

  /** The placeholder of a call answered without Redis: each limit its own, governing 0. */
  public static MultiLimitResult unavailable(boolean allowed, List<Limit> limits, boolean ms) {
    List<LimitResult> each = new ArrayList<>();
    for (Limit l : limits) {
      each.add(LimitResult.unavailable(allowed, l.limit(), l.window(), ms));
    }
    return new MultiLimitResult(each.get(0), each, 0);
  }
}
