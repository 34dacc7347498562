package io.github.redisslidingwindow;

import java.util.List;

/**
 * What a limiter needs from a Redis client: send one command, every element a string, and return
 * the reply as {@code Long}, {@code String} or {@code byte[]}, {@code List} of those, or null. An
 * error reply throws {@link RedisErrorReply}; no reply (refused, reset, timed out) throws {@link
 * RedisUnavailableException}.
 */
@FunctionalInterface
public interface SendCommand {
  Object send(List<String> command);

  /**
   * Whether this routes commands over a cluster's nodes (then the deny cache never reads the
   * server's clock: the nodes need not share one).
   */
  default boolean isCluster() {
    return false;
  }
}
