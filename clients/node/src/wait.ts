/** What `wait` decides after each check (the Python client's `_core.pause_before_retry`). */
import type { RateLimitResult } from './result';

/** The options of `SlidingWindowRateLimiter.wait`. */
export interface WaitOptions {
  /** Never wait past this many ms from the call (0: one check, no wait). Required. */
  timeoutMs: number;
  /** How much the request counts (>= 1). Default 1. */
  cost?: number;
  /** The window is in milliseconds. */
  ms?: boolean;
}

/**
 * Milliseconds to sleep before checking again, or undefined to return `result` now
 * (allowed; never possible, cost > limit; answered without Redis; no time left). The sleep
 * is the exact retry_after, cut to the time left.
 */
export function pauseBeforeRetry(result: RateLimitResult, remainingMs: number): number | undefined {
  if (result.allowed || result.degraded || result.retryAfter < 0 || !(remainingMs > 0)) return undefined;
  return Math.min(result.retryAfter * (result.ms ? 1 : 1000), remainingMs);
}
