package io.github.redisslidingwindow;

import java.util.Locale;

/** An error reply from the server ({@code ERR ...}, {@code NOSCRIPT ...}, {@code NOPERM ...}). */
public class RedisErrorReply extends SlidingWindowException {
  public RedisErrorReply(String message) {
    super(message);
  }

  public RedisErrorReply(String message, Throwable cause) {
    super(message, cause);
  }

  /** The error's first word ({@code ERR}, {@code NOSCRIPT}, ...). */
  public String code() {
    String m = String.valueOf(getMessage()).strip();
    int sp = m.indexOf(' ');
    return sp < 0 ? m : m.substring(0, sp);
  }

  boolean unknownCommand(String name) {
    String t = String.valueOf(getMessage()).toLowerCase(Locale.ROOT);
    return t.contains(name.toLowerCase(Locale.ROOT))
        && (t.contains("unknown command") || t.contains("command doesn't exist"));
  }

  boolean functionMissing() {
    return String.valueOf(getMessage()).toLowerCase(Locale.ROOT).contains("function not found");
  }

  boolean noscript() {
    return code().equals("NOSCRIPT");
  }

  boolean noperm() {
    return code().equals("NOPERM");
  }
}
