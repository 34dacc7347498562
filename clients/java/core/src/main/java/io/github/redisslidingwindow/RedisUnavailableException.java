package io.github.redisslidingwindow;

/** No reply: the connection was refused, reset or timed out (an outage). */
public class RedisUnavailableException extends SlidingWindowException {
  public RedisUnavailableException(String message, Throwable cause) {
    super(message, cause);
  }
}
