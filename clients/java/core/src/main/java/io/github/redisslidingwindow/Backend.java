package io.github.redisslidingwindow;

/** Which server side a limiter uses. */
public enum Backend {
  /** The module when the server has it, else the library (loaded when allowed). */
  AUTO,
  /** The module only. */
  MODULE,
  /** The library only. */
  LIBRARY
}
