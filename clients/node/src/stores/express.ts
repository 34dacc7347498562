/**
 * A store for express-rate-limit 8: `rateLimit({ windowMs, limit, store: new SlidingWindowStore({ client }) })`.
 *
 * increment is one SLIDINGWINDOW.CHECK (MS unit, window = windowMs): a refused request is
 * not counted and comes back with totalHits = limit + 1, so the middleware refuses it;
 * resetTime is when the same request would be allowed (refused) or when the window is empty
 * (allowed), which is what its Retry-After and RateLimit-Reset headers then say. decrement is
 * a REFUND (skipFailedRequests / skipSuccessfulRequests), resetKey deletes the key, get is a PEEK.
 *
 * The store sees `limit` only through init(): with a number it limits exactly; with a
 * function (a limit per request) it cannot see each request's limit, so it counts every
 * request under `maxLimit` (default 2^53 - 1) and the middleware compares the sliding
 * estimate with the request's limit: refused requests are then counted too.
 *
 * `denyCache` (default true): refusals are answered without Redis until Redis could allow
 * them (see DenyCache); false: this store's calls bypass any cache its limiter has.
 */
import type { RedisClientLike } from '../adapters';
import { attachDenyCache } from '../deny-cache';
import { SlidingWindowRateLimiter, type CallOptions, type LimiterOptions } from '../limiter';

const MAX = Number.MAX_SAFE_INTEGER;

export interface ExpressStoreOptions extends LimiterOptions {
  /** Your client (ioredis, node-redis, single node or cluster) ... */
  client?: RedisClientLike;
  /** ... or a function sending one command: `(...args) => client.sendCommand(args)`. */
  sendCommand?: (...args: string[]) => Promise<unknown>;
  /** ... or a limiter of your own (its prefix applies). */
  limiter?: SlidingWindowRateLimiter;
  /** The limit counted under when the middleware's `limit` is a function. */
  maxLimit?: number;
}

interface ClientRateLimitInfo { totalHits: number; resetTime: Date | undefined }
interface InitOptions { windowMs: number; limit: unknown; skipFailedRequests?: boolean; skipSuccessfulRequests?: boolean }

export class SlidingWindowStore {
  readonly limiter: SlidingWindowRateLimiter;
  /** Keys are shared between instances (the double-count check). */
  readonly localKeys = false;
  readonly prefix: string;
  windowMs = 60000;
  private limit: number | undefined;
  private readonly maxLimit: number;
  // Requests this process answered without counting them (refused, or Redis not asked):
  // express-rate-limit calls decrement for them too (a 429 is a failed request), and a REFUND
  // would give back someone else's request. Each is skipped once; unclaimed ones expire.
  private readonly uncounted = new Map<string, { n: number; until: number }>();
  private tracking = false;
  /** This store's CHECKs go through the limiter's deny cache. */
  private readonly cached: boolean;
  /** Every CHECK's options (made once: the limiter does not change them). */
  private readonly checkOptions: CallOptions;

  constructor(options: ExpressStoreOptions) {
    const { client, sendCommand, limiter, maxLimit, denyCache, ...rest } = options;
    const target = limiter ?? client ?? sendCommand;
    if (target === undefined) throw new TypeError('SlidingWindowStore needs a client, sendCommand or limiter');
    this.limiter = target instanceof SlidingWindowRateLimiter ? target
      : new SlidingWindowRateLimiter(target, { prefix: 'erl:', ...rest });
    this.cached = attachDenyCache(this.limiter, denyCache ?? true);
    this.checkOptions = { ms: true, denyCache: this.cached };
    this.prefix = this.limiter.prefix;
    this.maxLimit = maxLimit ?? MAX;
  }

  init(options: InitOptions): void {
    this.windowMs = options.windowMs;
    this.limit = typeof options.limit === 'number' ? options.limit : undefined;
    this.tracking = options.skipFailedRequests === true || options.skipSuccessfulRequests === true;
  }

  private markUncounted(key: string): void {
    if (!this.tracking) return;
    const now = Date.now();
    if (this.uncounted.size > 10000) {
      for (const [k, v] of this.uncounted) if (v.until < now) this.uncounted.delete(k);
    }
    const entry = this.uncounted.get(key);
    if (entry === undefined || entry.until < now) this.uncounted.set(key, { n: 1, until: now + this.windowMs });
    else { entry.n += 1; entry.until = now + this.windowMs; }
  }

  private claimUncounted(key: string): boolean {
    const entry = this.uncounted.get(key);
    if (entry === undefined) return false;
    if (entry.until < Date.now()) { this.uncounted.delete(key); return false; }
    entry.n -= 1;
    if (entry.n === 0) this.uncounted.delete(key);
    return true;
  }

  private get countedLimit(): number {
    return this.limit ?? this.maxLimit;
  }

  async increment(key: string): Promise<ClientRateLimitInfo> {
    const limit = this.countedLimit;
    const r = await this.limiter.check(key, limit, this.windowMs, this.checkOptions);
    if (r.degraded || !r.allowed) this.markUncounted(key);
    if (r.degraded) {
      // Redis was not asked: fail-open answers 1 hit (this request: express-rate-limit logs
      // ERR_ERL_INVALID_HITS for 0), fail-closed one over the limit.
      return { totalHits: r.allowed ? Math.min(1, limit) : limit + 1, resetTime: new Date(Date.now() + this.windowMs) };
    }
    const at = r.allowed ? r.resetAfter : r.retryAfter >= 0 ? r.retryAfter : r.resetAfter;
    return { totalHits: r.allowed ? r.count : Math.max(r.count, limit) + 1, resetTime: new Date(Date.now() + at) };
  }

  async decrement(key: string): Promise<void> {
    if (this.claimUncounted(key)) return; // refused or degraded: nothing was counted
    await this.limiter.refund(key, this.countedLimit, this.windowMs, { ms: true });
  }

  async get(key: string): Promise<ClientRateLimitInfo | undefined> {
    const r = await this.limiter.peek(key, this.countedLimit, this.windowMs, { ms: true });
    if (r.degraded) return undefined;
    const hits = r.allowed ? r.count - 1 : r.count; // PEEK counts the request it would be
    return { totalHits: hits, resetTime: new Date(Date.now() + r.resetAfter) };
  }

  async resetKey(key: string): Promise<void> {
    await this.limiter.reset(key);
  }
}
