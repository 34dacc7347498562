/**
 * HTTP headers for a decision, as the Python client sends them: X-RateLimit-Limit,
 * -Remaining, -Reset (seconds from now), Retry-After (denials), and the IETF draft's
 * RateLimit-Policy / RateLimit (draft-11 lists with several limits). Seconds are whole and
 * never early (millisecond values are rounded up). A degraded result gets no headers.
 */
import type { MultiLimitResult, RateLimitResult } from './result';

/** `value` as a Structured Field string (RFC 8941). */
export function sfString(value: string): string {
  if ([...value].some((c) => c.charCodeAt(0) < 0x20 || c.charCodeAt(0) > 0x7e)) {
    throw new RangeError(`policy name must be printable ASCII: ${JSON.stringify(value)}`);
  }
  return `"${value.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;
}

function moreQuota(r: RateLimitResult): number {
  return r.retryAfterSeconds ?? r.resetAfterSeconds;
}

function xHeaders(r: RateLimitResult): Record<string, string> {
  return {
    'X-RateLimit-Limit': String(r.limit),
    'X-RateLimit-Remaining': String(r.remaining),
    'X-RateLimit-Reset': String(r.resetAfterSeconds),
  };
}

function withRetry(headers: Record<string, string>, summary: RateLimitResult): Record<string, string> {
  const retry = summary.retryAfterSeconds;
  if (retry !== null) headers['Retry-After'] = String(retry);
  return headers;
}

/** The headers for one limit's result. */
export function rateLimitHeaders(result: RateLimitResult, policy = 'default'): Record<string, string> {
  if (result.degraded) return {};
  return withRetry({
    ...xHeaders(result),
    'RateLimit-Policy': `${sfString(policy)};q=${result.limit};w=${result.windowSeconds}`,
    'RateLimit': `${sfString(policy)};r=${result.remaining};t=${moreQuota(result)}`,
  }, result);
}

/** The name of one of several limits: `api/60s`, `api/500ms` (a window in ms of whole seconds, as a rate string's, in seconds: `api/1s`). */
export function limitName(policy: string, r: RateLimitResult): string {
  if (r.ms && r.window % 1000 === 0) return `${policy}/${r.window / 1000}s`;
  return `${policy}/${r.window}${r.ms ? 'ms' : 's'}`;
}

/** The headers for a decision on several limits (one limit: as rateLimitHeaders). */
export function limitsHeaders(result: MultiLimitResult, policy = 'default'): Record<string, string> {
  if (result.limits.length === 1) return rateLimitHeaders(result.summary, policy);
  if (result.degraded) return {};
  const names = result.limits.map((r) => sfString(limitName(policy, r)));
  return withRetry({
    ...xHeaders(result.governingResult),
    'RateLimit-Policy': result.limits.map((r, i) => `${names[i]};q=${r.limit};w=${r.windowSeconds}`).join(', '),
    'RateLimit': result.limits.map((r, i) => `${names[i]};r=${r.remaining};t=${moreQuota(r)}`).join(', '),
  }, result.summary);
}
