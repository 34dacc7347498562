/**
 * A storage for @nestjs/throttler 6:
 * `ThrottlerModule.forRoot({ throttlers: [{ ttl, limit }], storage: new SlidingWindowThrottlerStorage({ client }) })`.
 *
 * `increment(key, ttl, limit, blockDuration)` is one SLIDINGWINDOW.CHECK (MS unit, window =
 * ttl ms): an allowed request is counted, a refused one is not. The sliding window alone
 * refuses a request until it would fit again; `blockDuration` (the guard's default: ttl)
 * keeps a refused key refused for that long whatever the window says, as the in-memory
 * storage does: the first refusal writes a **block key** `<prefix><key>:block` with
 * `SET ... PX blockDuration NX`, and each call reads its PTTL in the same round trip as
 * the CHECK (two commands pipelined). A request that finds the block is refused, and if the
 * CHECK had counted it, given back with a REFUND, so blocked requests count nothing. The
 * block starts at the first refusal and is not extended by the refusals during it. With
 * `blockDuration <= 0` there is no block key and each call is the CHECK alone.
 *
 * `denyCache` (default true): refused CHECKs are answered without Redis until Redis could
 * allow them (see DenyCache; the block key's PTTL is still read); false: the storage's
 * calls bypass any cache its limiter has.
 */
import type { RedisClientLike } from '../adapters';
import { attachDenyCache } from '../deny-cache';
import { isOutage } from '../errors';
import { SlidingWindowRateLimiter, type LimiterOptions } from '../limiter';

export interface NestStorageOptions extends LimiterOptions {
  /** Your client (ioredis, node-redis, single node or cluster) ... */
  client?: RedisClientLike;
  /** ... or a limiter of your own (its prefix and circuit apply). */
  limiter?: SlidingWindowRateLimiter;
}

/** @nestjs/throttler's ThrottlerStorageRecord (times in whole seconds). */
export interface ThrottlerStorageRecord {
  totalHits: number;
  timeToExpire: number;
  isBlocked: boolean;
  timeToBlockExpire: number;
}

const seconds = (ms: number): number => Math.max(0, Math.ceil(ms / 1000));

export class SlidingWindowThrottlerStorage {
  readonly limiter: SlidingWindowRateLimiter;
  /** This storage's CHECKs go through the limiter's deny cache. */
  private readonly cached: boolean;

  constructor(options: NestStorageOptions) {
    const { client, limiter, denyCache, ...rest } = options;
    const target = limiter ?? client;
    if (target === undefined) throw new TypeError('SlidingWindowThrottlerStorage needs a client or a limiter');
    this.limiter = target instanceof SlidingWindowRateLimiter ? target
      : new SlidingWindowRateLimiter(target, { prefix: 'nest:', ...rest });
    this.cached = attachDenyCache(this.limiter, denyCache ?? true);
  }

  /** The block key of a throttler key. */
  blockKey(key: string): string {
    return `${this.limiter.prefix}${key}:block`;
  }

  /** ms the key stays blocked (0: not blocked, or Redis unavailable: the CHECK's circuit answers then). */
  private async blockedFor(blockKey: string): Promise<number> {
    try {
      const pttl = Number(await this.limiter.command(blockKey, ['PTTL', blockKey], true));
      return pttl > 0 ? pttl : 0;
    } catch (err) {
      if (isOutage(err)) return 0;
      throw err;
    }
  }

  private async block(blockKey: string, ms: number): Promise<void> {
    try {
      await this.limiter.command(blockKey, ['SET', blockKey, '1', 'PX', String(ms), 'NX']);
    } catch (err) {
      if (!isOutage(err)) throw err;
    }
  }

  async increment(key: string, ttl: number, limit: number, blockDuration: number, _throttlerName?: string): Promise<ThrottlerStorageRecord> {
    const window = Math.max(1, Math.round(ttl));
    const blockMs = Math.round(blockDuration);
    const useBlock = blockMs > 0 && !this.limiter.circuit.down;
    const blockKey = this.blockKey(key);
    const [blocked, r] = await Promise.all([
      useBlock ? this.blockedFor(blockKey) : Promise.resolve(0),
      this.limiter.check(key, limit, window, { ms: true, denyCache: this.cached }),
    ]);
    if (r.degraded) {
      // Redis was not asked: fail-open lets it through, fail-closed refuses it for a window.
      return r.allowed ? { totalHits: 0, timeToExpire: seconds(window), isBlocked: false, timeToBlockExpire: 0 }
        : { totalHits: limit + 1, timeToExpire: seconds(window), isBlocked: true, timeToBlockExpire: seconds(window) };
    }
    if (blocked > 0) {
      if (r.allowed) await this.limiter.refund(key, limit, window, { ms: true });
      return { totalHits: limit + 1, timeToExpire: seconds(r.resetAfter), isBlocked: true, timeToBlockExpire: seconds(blocked) };
    }
    if (r.allowed) {
      return { totalHits: r.count, timeToExpire: seconds(r.resetAfter), isBlocked: false, timeToBlockExpire: 0 };
    }
    let wait = r.retryAfter >= 0 ? r.retryAfter : r.resetAfter;
    if (useBlock) {
      await this.block(blockKey, blockMs);
      wait = Math.max(wait, blockMs);
    }
    return { totalHits: Math.max(r.count, limit) + 1, timeToExpire: seconds(r.resetAfter), isBlocked: true, timeToBlockExpire: seconds(wait) };
  }
}
