package io.github.redisslidingwindow;

import java.util.ArrayList;
import java.util.List;

/** A call as the server side takes it: the operation, the key and the arguments after it. */
public record Wire(Op op, String key, List<String> args) {
  public Wire {
    args = List.copyOf(args);
  }

  /** The arguments of a check, peek or refund on these limits. */
  public static Wire call(
      Op op, String key, List<Limit> limits, long cost, boolean ms, Long now, boolean details) {
    List<String> a = new ArrayList<>();
    Limit first = limits.get(0);
    a.add(Long.toString(first.limit()));
    a.add(Long.toString(first.window()));
    if (now != null) {
      a.add(Long.toString(now));
    }
    for (Limit l : limits.subList(1, limits.size())) {
      a.add("LIMIT");
      a.add(Long.toString(l.limit()));
      a.add(Long.toString(l.window()));
    }
    if (cost != 1) {
      a.add("COST");
      a.add(Long.toString(cost));
    }
    if (ms) {
      a.add("MS");
    }
    if (details) {
      a.add("DETAILS");
    }
    return new Wire(op, key, a);
  }

  /** The arguments of COUNTS. */
  public static Wire counts(String key, long window, boolean ms, Long now) {
    List<String> a = new ArrayList<>();
    a.add(Long.toString(window));
    if (now != null) {
      a.add(Long.toString(now));
    }
    if (ms) {
      a.add("MS");
    }
    return new Wire(Op.COUNTS, key, a);
  }

  /** The command that carries this call in a mode. */
  public List<String> command(Mode mode) {
    List<String> c = new ArrayList<>();
    switch (mode) {
      case MODULE -> {
        c.add(op.command());
        c.add(key);
      }
      case FUNCTION -> {
        c.add(op.readonly() ? "FCALL_RO" : "FCALL");
        c.add(op.function());
        c.add("1");
        c.add(key);
      }
      case EVAL -> {
        c.add("EVALSHA");
        c.add(Library.sha());
        c.add("1");
        c.add(key);
        c.add(op.function());
      }
    }
    c.addAll(args);
    return c;
  }

  /** EVAL with the library's body, after a NOSCRIPT. */
  public List<String> eval() {
    List<String> c = new ArrayList<>(List.of("EVAL", Library.body(), "1", key, op.function()));
    c.addAll(args);
    return c;
  }
}
