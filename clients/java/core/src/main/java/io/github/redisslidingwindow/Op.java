package io.github.redisslidingwindow;

/** The server side's four calls. */
public enum Op {
  CHECK("SLIDINGWINDOW.CHECK", "slidingwindow_check", false),
  PEEK("SLIDINGWINDOW.PEEK", "slidingwindow_peek", true),
  REFUND("SLIDINGWINDOW.REFUND", "slidingwindow_refund", false),
  COUNTS("SLIDINGWINDOW.COUNTS", "slidingwindow_counts", true);

  private final String command;
  private final String function;
  private final boolean readonly;

  Op(String command, String function, boolean readonly) {
    this.command = command;
    this.function = function;
    this.readonly = readonly;
  }

  /** The module's command. */
  public String command() {
    return command;
  }

  /** The library's function. */
  public String function() {
    return function;
  }

  /** Read-only: sent with FCALL_RO. */
  public boolean readonly() {
    return readonly;
  }
}
