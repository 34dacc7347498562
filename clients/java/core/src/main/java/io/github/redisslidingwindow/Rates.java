package io.github.redisslidingwindow;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * Rate strings ({@code "10/second;1000/hour"}) to limits. One rate: {@code <count> (/ | per) [<n>]
 * <unit>}, unit second, minute, hour or day (plural allowed, any case), separated by {@code ;},
 * {@code ,} or {@code |}. Windows come out in milliseconds: a call given a rate string sends MS.
 */
public final class Rates {
  /** At most this many limits per call. */
  public static final int MAX_LIMITS = 8;

  private static final String HINT =
      "write e.g. \"10/second\", \"1000 per hour\" or \"100/5 minutes\"";
  private static final String[] UNITS = {"second", "minute", "hour", "day"};
  private static final long[] SECONDS = {1, 60, 3600, 86400};

  private Rates() {}

  /** Parses a rate string to its limits (windows in milliseconds). */
  public static List<Limit> parseLimits(String text) {
    List<String> items = new ArrayList<>();
    for (String i : text.split("[;,|]", -1)) {
      if (!i.trim().isEmpty()) {
        items.add(i);
      }
    }
    if (items.isEmpty()) {
      throw new RateException(RateException.Kind.EMPTY, "no rate in '" + text + "': " + HINT);
    }
    List<Limit> rates = new ArrayList<>();
    for (String i : items) {
      Limit r = parseRate(i, text);
      for (Limit o : rates) {
        if (o.window() == r.window()) {
          throw new RateException(
              RateException.Kind.DUPLICATE_WINDOW,
              "two rates with the same window in '"
                  + text
                  + "': "
                  + describe(o)
                  + " and "
                  + describe(r)
                  + "; keep one (the smaller limit is the one that applies)");
        }
      }
      rates.add(r);
    }
    if (rates.size() > MAX_LIMITS) {
      throw new RateException(
          RateException.Kind.TOO_MANY,
          rates.size() + " rates in '" + text + "': at most " + MAX_LIMITS + " per policy");
    }
    return List.copyOf(rates);
  }

  private static int digits(String s) {
    int end = 0;
    while (end < s.length() && s.charAt(end) >= '0' && s.charAt(end) <= '9') {
      end++;
    }
    return end;
  }

  private static boolean alpha(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  }

  static Limit parseRate(String raw, String text) {
    String item = raw.trim();
    RateException bad =
        new RateException(
            RateException.Kind.SYNTAX, "bad rate '" + item + "' in '" + text + "': " + HINT);
    int n = digits(item);
    if (n == 0) {
      throw bad;
    }
    String count = item.substring(0, n);
    String rest = item.substring(n).stripLeading();
    if (rest.startsWith("/")) {
      rest = rest.substring(1);
    } else if (rest.length() >= 3 && rest.substring(0, 3).equalsIgnoreCase("per")) {
      String after = rest.substring(3);
      if (!after.isEmpty()) {
        char c = after.charAt(0);
        if (alpha(c) || (c >= '0' && c <= '9') || c == '_') {
          throw bad;
        }
      }
      rest = after;
    } else {
      throw bad;
    }
    rest = rest.stripLeading();
    int m = digits(rest);
    String multiplier = rest.substring(0, m);
    rest = rest.substring(m).stripLeading();
    if (rest.isEmpty() || !rest.chars().allMatch(c -> alpha((char) c))) {
      throw bad;
    }
    long limit;
    long mult;
    try {
      limit = Long.parseLong(count);
      mult = multiplier.isEmpty() ? 1 : Long.parseLong(multiplier);
    } catch (NumberFormatException e) {
      throw bad;
    }
    if (mult < 1) {
      throw new RateException(
          RateException.Kind.ZERO_MULTIPLIER,
          "bad rate '" + item + "' in '" + text + "': the window must be >= 1");
    }
    long seconds = unitSeconds(rest, item, text);
    try {
      return new Limit(limit, Math.multiplyExact(Math.multiplyExact(mult, seconds), 1000L));
    } catch (ArithmeticException e) {
      throw bad;
    }
  }

  private static long unitSeconds(String word, String item, String text) {
    String lower = word.toLowerCase(Locale.ROOT);
    String name = lower;
    if (name.endsWith("s")) {
      String stripped = name.substring(0, name.length() - 1);
      for (String u : UNITS) {
        if (u.equals(stripped)) {
          name = stripped;
        }
      }
    }
    for (int i = 0; i < UNITS.length; i++) {
      if (UNITS[i].equals(name)) {
        return SECONDS[i];
      }
    }
    String bare = lower.replaceAll("s+$", "");
    if (bare.equals("month") || bare.equals("year")) {
      throw new RateException(
          RateException.Kind.MONTH_YEAR,
          "bad rate '"
              + item
              + "' in '"
              + text
              + "': '"
              + word
              + "' windows vary in length: use days (e.g. 30 days)");
    }
    throw new RateException(
        RateException.Kind.UNIT,
        "bad rate '"
            + item
            + "' in '"
            + text
            + "': unknown unit '"
            + word
            + "' (second, minute, hour or day)");
  }

  static String describe(Limit l) {
    long seconds = l.window() / 1000;
    for (int i = UNITS.length - 1; i >= 0; i--) {
      if (l.window() % 1000 == 0 && seconds % SECONDS[i] == 0) {
        long n = seconds / SECONDS[i];
        return n == 1
            ? l.limit() + " per " + UNITS[i]
            : l.limit() + " per " + n + " " + UNITS[i] + "s";
      }
    }
    return l.limit() + " per " + l.window() + " ms";
  }
}
