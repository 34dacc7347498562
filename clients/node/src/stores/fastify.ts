/**
 * A custom store for @fastify/rate-limit 11:
 * `fastify.register(rateLimit, { max, timeWindow, store: fastifyStore({ client }) })`.
 * The plugin constructs the store itself (`new Store(options)`), so fastifyStore() returns
 * the class. `incr` is one CHECK (MS unit, window = timeWindow ms, limit = max, both per
 * call, so per-route and dynamic max/timeWindow are exact): a refused request is not
 * counted and answers current = max + 1 and ttl = ms until the same request is allowed;
 * an allowed one answers its count and the ms until the window is empty. `read` (for
 * `{ increment: false }`) is a PEEK. `child(routeOptions)` keys each route apart, as the
 * plugin's own RedisStore does. `denyCache` (default true): refusals answered without
 * Redis until Redis could allow them (see DenyCache); false: the store's calls bypass it.
 */
import type { RedisClientLike } from '../adapters';
import { attachDenyCache } from '../deny-cache';
import { SlidingWindowRateLimiter, type CallOptions, type LimiterOptions } from '../limiter';

export interface FastifyStoreOptions extends LimiterOptions {
  client?: RedisClientLike;
  limiter?: SlidingWindowRateLimiter;
}

type Callback = (error: Error | null, result?: { current: number; ttl: number }) => void;

/** What the plugin passes to child(): the route's merged options, the route under `routeInfo`. */
interface ChildOptions { routeInfo?: { method?: string; url?: string } }

export interface FastifyRateLimitStore {
  incr(key: string, callback: Callback, timeWindow: number, max: number): void;
  read(key: string, callback: Callback, timeWindow: number, max: number): void;
  /**
   * `routeOptions` is typed `object`: the plugin declares it as the route's RouteOptions,
   * with which a `{ routeInfo? }` parameter is not compatible (no property in common), while
   * it passes the merged options with the route under `routeInfo`.
   */
  child(routeOptions: object): FastifyRateLimitStore;
}

class Store implements FastifyRateLimitStore {
  /** Every CHECK's options (made once: the limiter does not change them). */
  private readonly checkOptions: CallOptions;

  constructor(readonly limiter: SlidingWindowRateLimiter, readonly keyPrefix: string, readonly cached: boolean) {
    this.checkOptions = { ms: true, denyCache: cached };
  }

  incr(key: string, callback: Callback, timeWindow: number, max: number): void {
    this.limiter.check(this.keyPrefix + key, max, Math.max(1, timeWindow), this.checkOptions).then((r) => {
      if (r.degraded) callback(null, { current: r.allowed ? 0 : max + 1, ttl: timeWindow });
      else if (r.allowed) callback(null, { current: r.count, ttl: r.resetAfter });
      else callback(null, { current: Math.max(r.count, max) + 1, ttl: r.retryAfter >= 0 ? r.retryAfter : r.resetAfter });
    }, (err: Error) => callback(err));
  }

  read(key: string, callback: Callback, timeWindow: number, max: number): void {
    this.limiter.peek(this.keyPrefix + key, max, Math.max(1, timeWindow), { ms: true }).then((r) => {
      callback(null, { current: r.degraded ? 0 : r.allowed ? r.count - 1 : r.count, ttl: r.resetAfter });
    }, (err: Error) => callback(err));
  }

  child(routeOptions: object): FastifyRateLimitStore {
    const info = (routeOptions as ChildOptions).routeInfo ?? {};
    return new Store(this.limiter, `${this.keyPrefix}${info.method ?? ''}${info.url ?? ''}-`, this.cached);
  }
}

/** The store class for @fastify/rate-limit's `store` option. */
export function fastifyStore(options: FastifyStoreOptions): new (pluginOptions?: unknown) => FastifyRateLimitStore {
  const { client, limiter, denyCache, ...rest } = options;
  const target = limiter ?? client;
  if (target === undefined) throw new TypeError('fastifyStore needs a client or a limiter');
  const shared = target instanceof SlidingWindowRateLimiter ? target
    : new SlidingWindowRateLimiter(target, { prefix: 'frl:', ...rest });
  const cached = attachDenyCache(shared, denyCache ?? true);
  return class FastifySlidingWindowStore extends Store {
    constructor() { super(shared, '', cached); }
  };
}
