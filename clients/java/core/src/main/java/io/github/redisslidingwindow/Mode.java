package io.github.redisslidingwindow;

/** How a call reaches the server side. */
public enum Mode {
  /** The module's SLIDINGWINDOW.* commands. */
  MODULE,
  /** The Functions library with FCALL / FCALL_RO (Redis 7+). */
  FUNCTION,
  /** The library's body with EVALSHA, EVAL after NOSCRIPT (Redis 6.2). */
  EVAL
}
