package io.github.redisslidingwindow;

/** The base of this client's exceptions. */
public class SlidingWindowException extends RuntimeException {
  public SlidingWindowException(String message) {
    super(message);
  }

  public SlidingWindowException(String message, Throwable cause) {
    super(message, cause);
  }
}
