package io.github.redisslidingwindow;

/** A rate string that does not parse, or a rate string given with an explicit ms. */
public final class RateException extends IllegalArgumentException {
  /** The error class, as rates.json names it. */
  public enum Kind {
    EMPTY,
    SYNTAX,
    UNIT,
    MONTH_YEAR,
    ZERO_MULTIPLIER,
    DUPLICATE_WINDOW,
    TOO_MANY,
    MS_OPTION
  }

  private final Kind kind;

  public RateException(Kind kind, String message) {
    super(message);
    this.kind = kind;
  }

  public Kind kind() {
    return kind;
  }
}
