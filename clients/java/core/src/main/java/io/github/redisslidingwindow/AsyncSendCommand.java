package io.github.redisslidingwindow;

import java.util.List;
import java.util.concurrent.CompletableFuture;

/**
 * A {@link SendCommand} that can also send without blocking: the reply as {@link SendCommand#send},
 * or the future failed with {@link RedisErrorReply} (an error reply) or {@link
 * RedisUnavailableException} (no reply). The limiter's {@code *Async} calls use it; on a plain
 * {@code SendCommand} they run the blocking call on the caller's thread.
 */
public interface AsyncSendCommand extends SendCommand {
  CompletableFuture<Object> sendAsync(List<String> command);
}
