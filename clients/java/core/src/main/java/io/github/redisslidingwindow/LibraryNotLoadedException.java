package io.github.redisslidingwindow;

/**
 * Neither the module nor the library is on the server, and this user may not load the library: a
 * configuration error, thrown (never answered fail-open).
 */
public final class LibraryNotLoadedException extends SlidingWindowException {
  public LibraryNotLoadedException(String message, Throwable cause) {
    super(message, cause);
  }
}
