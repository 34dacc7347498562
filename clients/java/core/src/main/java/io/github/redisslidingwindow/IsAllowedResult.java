package io.github.redisslidingwindow;

/** The seed's {@code [allowed, count]} answer. */
public record IsAllowedResult(boolean allowed, long count) {}
