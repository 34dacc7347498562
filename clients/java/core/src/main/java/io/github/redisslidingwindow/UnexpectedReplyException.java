package io.github.redisslidingwindow;

/** A reply that is not what the command answers. */
public final class UnexpectedReplyException extends SlidingWindowException {
  public UnexpectedReplyException(String message) {
    super(message);
  }
}
