/**
 * An API gateway on Express 5 with per-route rate limits (see README.md here):
 *
 *   cd clients/node && npm ci && npm run build
 *   REDIS_URL=redis://127.0.0.1:6379 node build/examples/express-gateway/app.js
 *
 * | route               | policy                                    | counted per                  | how                                  |
 * |---------------------|-------------------------------------------|------------------------------|--------------------------------------|
 * | POST /api/login     | `login`: 3 failed logins per 15 minutes   | client address, always       | express-rate-limit + our store,      |
 * |                     |                                           |                              | skipSuccessfulRequests               |
 * | GET /api/report     | `report`: 2 per minute                    | API key, else client address | express-rate-limit + our store       |
 * | /api/...            | `api`: 5 per 10 s and 100 per hour        | API key, else client address | the limiter, both limits in one call |
 * | GET /health         | not limited                               |                              |                                      |
 *
 * Environment: REDIS_URL (default redis://127.0.0.1:6379), REDIS_CLUSTER=1 (REDIS_URL is
 * one node of a cluster), TRUSTED_PROXIES (comma-separated networks of your proxies,
 * whose X-Forwarded-For is believed; default none), FAIL_OPEN=0 (503 instead of letting
 * requests through while Redis is down), PORT (default 3000), HOST (default 127.0.0.1).
 */
import express, { type NextFunction, type Request, type RequestHandler, type Response } from 'express';
import { rateLimit } from 'express-rate-limit';
import IORedis, { Cluster } from 'ioredis';
// In your project: from 'redis-slidingwindow'.
import {
  SlidingWindowRateLimiter, SlidingWindowStore, byIp, headerApiKey, limitsHeaders, parseLimits, requestIdentity,
  type LimitsSpec, type RedisClientLike,
} from '../../src';

/** Demo keys. A real gateway looks the key up; only keys it accepts become identities. */
export const API_KEYS = new Map([['demo-key-1', 'alice'], ['demo-key-2', 'bob']]);
/** Demo users for /api/login. */
export const USERS = new Map([['alice', 'wonderland'], ['bob', 'builder']]);

export interface GatewayOptions {
  /** Your client: ioredis or node-redis, one node or a cluster. */
  client: RedisClientLike;
  /** Networks of the proxies in front of the app, whose X-Forwarded-For is believed. Default none. */
  trustedProxies?: string[];
  /** Key prefix. Default "gw:". */
  prefix?: string;
  /** Let requests through while Redis is down (default), or answer 503. */
  failOpen?: boolean;
  /** The limiter's timeout per call, ms (default 500). */
  timeoutMs?: number;
  /** Limits of /api/..., checked together. Default "5/10 seconds;100/hour". */
  api?: LimitsSpec;
  /** /api/report, through express-rate-limit. Default 2 per minute. */
  report?: { limit: number; windowMs: number };
  /** Failed logins allowed per address. Default 3 per 15 minutes. */
  login?: { failures: number; windowMs: number };
}

export interface Gateway {
  app: express.Express;
  limiter: SlidingWindowRateLimiter;
}

/**
 * A middleware for one policy: one CHECK of every limit (all or nothing), the Python
 * middleware's headers, and its 429 (or 503, fail-closed during an outage) body.
 */
export function limit(limiter: SlidingWindowRateLimiter, name: string, limits: LimitsSpec,
  identity: (req: Request) => string): RequestHandler {
  // A bad rate fails at start-up; a rate string's windows are in ms, and its calls say so.
  const [rates, ms] = typeof limits === 'string' ? [parseLimits(limits), true] : [limits, false];
  return async (req: Request, res: Response, next: NextFunction) => {
    const decision = await limiter.checkLimits(`${name}:${identity(req)}`, rates, { ms });
    res.set(limitsHeaders(decision, name));
    if (decision.allowed) { next(); return; }
    if (decision.degraded) {
      res.status(503).json({ error: 'rate_limiter_unavailable', message: 'The rate limiter is unavailable; try again later.' });
      return;
    }
    const { limit: max, retryAfterSeconds } = decision.summary;
    res.status(429).json({ error: 'rate_limited', policy: name, limit: max, retry_after: retryAfterSeconds });
  };
}

export function createApp(options: GatewayOptions): Gateway {
  const trustedProxies = options.trustedProxies ?? [];
  const limiter = new SlidingWindowRateLimiter(options.client, {
    prefix: options.prefix ?? 'gw:', failOpen: options.failOpen ?? true, timeoutMs: options.timeoutMs,
  });
  // Who is asking: a valid API key, else the client address (X-Forwarded-For only from trusted proxies).
  const identity = requestIdentity({ trustedProxies, apiKey: headerApiKey('X-API-Key', API_KEYS) });
  const address = byIp(trustedProxies);
  const report = options.report ?? { limit: 2, windowMs: 60_000 };
  const login = options.login ?? { failures: 3, windowMs: 15 * 60_000 };
  // The identity is ours, not Express's req.ip: its X-Forwarded-For check does not apply.
  const validate = { xForwardedForHeader: false };

  const app = express();
  app.disable('x-powered-by');

  app.get('/health', (_req, res) => { res.json({ ok: true }); });

  // Logins: only failures count (a REFUND gives a successful one back), per address whatever key is sent.
  app.post('/api/login', rateLimit({
    windowMs: login.windowMs, limit: login.failures, skipSuccessfulRequests: true,
    keyGenerator: (req) => `login:${address(req)}`,
    store: new SlidingWindowStore({ limiter }),
    standardHeaders: 'draft-8', legacyHeaders: false, validate,
    message: { error: 'rate_limited', policy: 'login' },
  }), express.json(), (req, res) => {
    const { user, password } = (req.body ?? {}) as { user?: unknown; password?: unknown };
    if (typeof user === 'string' && USERS.get(user) === password) res.json({ token: 'not-a-real-token' });
    else res.status(401).json({ error: 'bad_credentials' });
  });

  // One route, one limit, through express-rate-limit and our store.
  app.get('/api/report', rateLimit({
    windowMs: report.windowMs, limit: report.limit,
    keyGenerator: (req) => `report:${identity(req)}`,
    store: new SlidingWindowStore({ limiter }),
    standardHeaders: 'draft-8', legacyHeaders: false, validate,
    message: { error: 'rate_limited', policy: 'report' },
  }), (_req, res) => { res.json({ report: [1, 2, 3] }); });

  // Everything else under /api: several limits in one call.
  app.use('/api', limit(limiter, 'api', options.api ?? '5/10 seconds;100/hour', identity));
  app.get('/api/hello', (req, res) => {
    res.json({ hello: API_KEYS.get(req.get('x-api-key') ?? '') ?? 'anonymous' });
  });

  return { app, limiter };
}

function fromEnv(): RedisClientLike {
  const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  const { hostname, port } = new URL(url);
  const client = process.env.REDIS_CLUSTER === '1' ? new Cluster([{ host: hostname, port: Number(port || 6379) }])
    : new IORedis(url);
  client.on('error', () => undefined); // the limiter reports outages itself: one warning, one recovery line
  return client;
}

if (require.main === module) {
  const { app } = createApp({
    client: fromEnv(),
    trustedProxies: (process.env.TRUSTED_PROXIES ?? '').split(',').map((s) => s.trim()).filter((s) => s !== ''),
    failOpen: process.env.FAIL_OPEN !== '0',
  });
  const port = Number(process.env.PORT ?? 3000);
  const host = process.env.HOST ?? '127.0.0.1';
  app.listen(port, host, () => { console.log(`express gateway on http://${host}:${port}`); });
}
