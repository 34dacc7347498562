package io.github.redisslidingwindow.reactive;

import io.github.redisslidingwindow.CallOptions;
import io.github.redisslidingwindow.Limit;
import io.github.redisslidingwindow.LimitResult;
import io.github.redisslidingwindow.MultiLimitResult;
import io.github.redisslidingwindow.RateLimiter;
import io.github.redisslidingwindow.WindowCounts;
import java.util.List;
import java.util.Objects;
import reactor.core.publisher.Mono;

/**
 * The limiter's calls as Reactor {@link Mono}s (Reactor comes with Lettuce): each subscription
 * sends the call through the limiter's {@code *Async} path, so on Lettuce's adapters nothing
 * blocks. Argument errors are signalled as errors, as every other error; an outage answers as the
 * limiter's circuit says.
 *
 * <pre>{@code
 * ReactiveRateLimiter rl = new ReactiveRateLimiter(
 *     RateLimiter.builder(new LettuceSendCommand(connection)).build());
 * Mono<MultiLimitResult> m = rl.checkLimits("user:42", "10/second;1000/hour", CallOptions.defaults());
 * }</pre>
 */
public final class ReactiveRateLimiter {
  private final RateLimiter limiter;

  public ReactiveRateLimiter(RateLimiter limiter) {
    this.limiter = Objects.requireNonNull(limiter);
  }

  /** The blocking limiter underneath (its mode, its circuit). */
  public RateLimiter limiter() {
    return limiter;
  }

  public Mono<LimitResult> check(String id, long limit, long window) {
    return check(id, limit, window, CallOptions.defaults());
  }

  public Mono<LimitResult> check(String id, long limit, long window, CallOptions o) {
    return Mono.fromCompletionStage(() -> limiter.checkAsync(id, limit, window, o));
  }

  public Mono<LimitResult> peek(String id, long limit, long window, CallOptions o) {
    return Mono.fromCompletionStage(() -> limiter.peekAsync(id, limit, window, o));
  }

  public Mono<LimitResult> refund(String id, long limit, long window, CallOptions o) {
    return Mono.fromCompletionStage(() -> limiter.refundAsync(id, limit, window, o));
  }

  public Mono<MultiLimitResult> checkLimits(String id, List<Limit> limits, CallOptions o) {
    return Mono.fromCompletionStage(() -> limiter.checkLimitsAsync(id, limits, o));
  }

  public Mono<MultiLimitResult> checkLimits(String id, String rates, CallOptions o) {
    return Mono.fromCompletionStage(() -> limiter.checkLimitsAsync(id, rates, o));
  }

  public Mono<MultiLimitResult> peekLimits(String id, List<Limit> limits, CallOptions o) {
    return Mono.fromCompletionStage(() -> limiter.peekLimitsAsync(id, limits, o));
  }

  public Mono<MultiLimitResult> peekLimits(String id, String rates, CallOptions o) {
    return Mono.fromCompletionStage(() -> limiter.peekLimitsAsync(id, rates, o));
  }

  public Mono<MultiLimitResult> refundLimits(String id, List<Limit> limits, CallOptions o) {
    return Mono.fromCompletionStage(() -> limiter.refundLimitsAsync(id, limits, o));
  }

  public Mono<MultiLimitResult> refundLimits(String id, String rates, CallOptions o) {
    return Mono.fromCompletionStage(() -> limiter.refundLimitsAsync(id, rates, o));
  }

  public Mono<WindowCounts> counts(String id, long window, CallOptions o) {
    return Mono.fromCompletionStage(() -> limiter.countsAsync(id, window, o));
  }
}
