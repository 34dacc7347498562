package io.github.redisslidingwindow;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/** Reads the server's replies into typed results. */
public final class Replies {
  private Replies() {}

  static long integer(Object v, String what) {
    if (v instanceof Long l) {
      return l;
    }
    if (v instanceof Integer i) {
      return i;
    }
    if (v instanceof byte[] b) {
      v = new String(b, StandardCharsets.UTF_8);
    }
    if (v instanceof String s) {
      try {
        return Long.parseLong(s);
      } catch (NumberFormatException e) {
        // below
      }
    }
    throw new UnexpectedReplyException(what + ": not an integer: " + show(v));
  }

  static String show(Object v) {
    if (v instanceof byte[] b) {
      return new String(b, StandardCharsets.UTF_8);
    }
    return String.valueOf(v);
  }

  static List<?> array(Object v, int n, String what) {
    if (v instanceof List<?> l && l.size() >= n) {
      return l;
    }
    throw new UnexpectedReplyException(what + ": expected " + n + " elements, got " + show(v));
  }

  private static long[] ints(Object v, int n, String what) {
    List<?> l = array(v, n, what);
    long[] out = new long[n];
    for (int i = 0; i < n; i++) {
      out[i] = integer(l.get(i), what);
    }
    return out;
  }

  private static long u(long v) {
    return Math.max(0, v);
  }

  /**
   * From a DETAILS reply: 6 integers for one limit, a 7th element (one {@code [window, limit,
   * count, remaining, retry_after, reset_after]} per limit) for several.
   */
  public static MultiLimitResult decision(Object reply, List<Limit> limits, long cost, boolean ms) {
    long[] head = ints(reply, 6, "DETAILS reply");
    boolean allowed = head[0] == 1;
    if (limits.size() == 1) {
      LimitResult s =
          new LimitResult(
              allowed,
              u(head[1]),
              u(head[2]),
              u(head[3]),
              head[4],
              u(head[5]),
              limits.get(0).window(),
              ms,
              false);
      return new MultiLimitResult(s, List.of(s), 0);
    }
    List<?> items = array(reply, 7, "DETAILS reply with several limits");
    if (!(items.get(6) instanceof List<?> per) || per.size() != limits.size()) {
      throw new UnexpectedReplyException("7th element: " + show(items.get(6)));
    }
    List<LimitResult> each = new ArrayList<>();
    int governing = -1;
    for (Object item : per) {
      long[] f = ints(item, 6, "a limit's verdict");
      long limit = u(f[1]);
      long retry = f[4];
      boolean alone = allowed || (retry == -1 && cost <= limit);
      if (governing < 0
          && f[1] == head[2]
          && f[2] == head[1]
          && f[3] == head[3]
          && f[4] == head[4]) {
        governing = each.size();
      }
      each.add(new LimitResult(alone, u(f[2]), limit, u(f[3]), retry, u(f[5]), u(f[0]), ms, false));
    }
    if (governing < 0) {
      throw new UnexpectedReplyException(
          "no limit in the DETAILS reply matches its summary: " + show(reply));
    }
    LimitResult s =
        new LimitResult(
            allowed,
            u(head[1]),
            u(head[2]),
            u(head[3]),
            head[4],
            u(head[5]),
            each.get(governing).window(),
            ms,
            false);
    return new MultiLimitResult(s, each, governing);
  }

  /** From the seed's {@code [allowed, count]} reply. */
  public static IsAllowedResult isAllowed(Object reply) {
    long[] f = ints(reply, 2, "CHECK reply");
    return new IsAllowedResult(f[0] == 1, u(f[1]));
  }

  /** From a COUNTS reply {@code [previous, current, elapsed]}. */
  public static WindowCounts counts(Object reply) {
    long[] f = ints(reply, 3, "COUNTS reply");
    return new WindowCounts(u(f[0]), u(f[1]), u(f[2]), false);
  }
}
