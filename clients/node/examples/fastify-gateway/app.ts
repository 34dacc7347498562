/**
 * An API gateway on Fastify 5 with per-route rate limits (see README.md here):
 *
 *   cd clients/node && npm ci && npm run build
 *   REDIS_URL=redis://127.0.0.1:6379 node build/examples/fastify-gateway/app.js
 *
 * | route               | policy                                    | counted per                  | how                                  |
 * |---------------------|-------------------------------------------|------------------------------|--------------------------------------|
 * | POST /api/login     | `login`: 3 failed logins per 15 minutes   | client address, always       | the limiter; a REFUND gives each     |
 * |                     |                                           |                              | successful login back                |
 * | GET /api/report     | `report`: 2 per minute                    | API key, else client address | @fastify/rate-limit + our store      |
 * | /api/...            | `api`: 5 per 10 s and 100 per hour        | API key, else client address | the limiter, both limits in one call |
 * | GET /health         | not limited                               |                              |                                      |
 *
 * Environment: REDIS_URL (default redis://127.0.0.1:6379), REDIS_CLUSTER=1 (REDIS_URL is
 * one node of a cluster), TRUSTED_PROXIES (comma-separated networks of your proxies,
 * whose X-Forwarded-For is believed; default none), FAIL_OPEN=0 (503 instead of letting
 * requests through while Redis is down), PORT (default 3000), HOST (default 127.0.0.1).
 */
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import rateLimit from '@fastify/rate-limit';
import { createClient, createCluster } from 'redis';
// In your project: from 'redis-slidingwindow'.
import {
  SlidingWindowRateLimiter, byIp, fastifyStore, headerApiKey, limitsHeaders, parseLimits, requestIdentity,
  type Limit, type LimitsSpec, type MultiLimitResult, type RedisClientLike,
} from '../../src';

/** Demo keys. A real gateway looks the key up; only keys it accepts become identities. */
export const API_KEYS = new Map([['demo-key-1', 'alice'], ['demo-key-2', 'bob']]);
/** Demo users for /api/login. */
export const USERS = new Map([['alice', 'wonderland'], ['bob', 'builder']]);

export interface GatewayOptions {
  /** Your client: ioredis or node-redis (connected), one node or a cluster. */
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
  /** /api/report, through @fastify/rate-limit. Default 2 per minute. */
  report?: { limit: number; windowMs: number };
  /** Failed logins allowed per address. Default "3/15 minutes". */
  login?: LimitsSpec;
}

export interface Gateway {
  app: FastifyInstance;
  limiter: SlidingWindowRateLimiter;
}

/** What the limit hook decided for a request, for its onSend hook. */
const decisions = new WeakMap<FastifyRequest, { key: string; limits: Limit[]; ms: boolean; decision: MultiLimitResult }>();

/**
 * An onRequest hook for one policy: one CHECK of every limit (all or nothing), the Python
 * middleware's headers, and its 429 (or 503, fail-closed during an outage) body.
 */
export function limit(limiter: SlidingWindowRateLimiter, name: string, limits: LimitsSpec,
  identity: (req: FastifyRequest) => string) {
  // A bad rate fails at start-up; a rate string's windows are in ms, and its calls say so.
  const ms = typeof limits === 'string';
  const rates = typeof limits === 'string' ? parseLimits(limits) : limits.map((l) =>
    (Array.isArray(l) ? { limit: l[0] as number, window: l[1] as number } : l as Limit));
  return async (request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply | undefined> => {
    const key = `${name}:${identity(request)}`;
    const decision = await limiter.checkLimits(key, rates, { ms });
    decisions.set(request, { key, limits: rates, ms, decision });
    reply.headers(limitsHeaders(decision, name));
    if (decision.allowed) return undefined;
    if (decision.degraded) {
      return reply.code(503).send({ error: 'rate_limiter_unavailable', message: 'The rate limiter is unavailable; try again later.' });
    }
    const { limit: max, retryAfterSeconds } = decision.summary;
    return reply.code(429).send({ error: 'rate_limited', policy: name, limit: max, retry_after: retryAfterSeconds });
  };
}

/**
 * An onSend hook: gives back a request the limit hook counted when its response is a
 * success (< 400), so only failures count. It runs before the response leaves, so the
 * client's next request already sees the refund (one more round trip, on successes only).
 * A request refused, or allowed without Redis (an outage), counted nothing: nothing to give back.
 */
export function countOnlyFailures(limiter: SlidingWindowRateLimiter) {
  return async (request: FastifyRequest, reply: FastifyReply, payload: unknown): Promise<unknown> => {
    const seen = decisions.get(request);
    if (seen !== undefined && seen.decision.allowed && !seen.decision.degraded && reply.statusCode < 400) {
      await limiter.refundLimits(seen.key, seen.limits, { ms: seen.ms });
    }
    return payload;
  };
}

export async function createApp(options: GatewayOptions): Promise<Gateway> {
  const trustedProxies = options.trustedProxies ?? [];
  const limiter = new SlidingWindowRateLimiter(options.client, {
    prefix: options.prefix ?? 'gw:', failOpen: options.failOpen ?? true, timeoutMs: options.timeoutMs,
  });
  // Who is asking: a valid API key, else the client address (X-Forwarded-For only from trusted proxies).
  const identity = requestIdentity({ trustedProxies, apiKey: headerApiKey('X-API-Key', API_KEYS) });
  const address = byIp(trustedProxies);
  const report = options.report ?? { limit: 2, windowMs: 60_000 };

  // trustProxy stays off: the identity helper reads X-Forwarded-For itself, from trusted proxies only.
  const app = Fastify();
  // Routes opt in with config.rateLimit; keys are the same identities, per route (the store's child).
  await app.register(rateLimit, { global: false, store: fastifyStore({ limiter }), keyGenerator: identity });

  app.get('/health', async () => ({ ok: true }));

  // Logins: only failures count, per address whatever key is sent.
  app.post('/api/login', {
    onRequest: limit(limiter, 'login', options.login ?? '3/15 minutes', address),
    onSend: countOnlyFailures(limiter),
  }, async (request, reply) => {
    const { user, password } = (request.body ?? {}) as { user?: unknown; password?: unknown };
    if (typeof user === 'string' && USERS.get(user) === password) return { token: 'not-a-real-token' };
    return reply.code(401).send({ error: 'bad_credentials' });
  });

  // One route, one limit, through @fastify/rate-limit and our store.
  app.get('/api/report', { config: { rateLimit: { max: report.limit, timeWindow: report.windowMs } } },
    async () => ({ report: [1, 2, 3] }));

  // Everything else under /api: several limits in one call.
  await app.register(async (api) => {
    api.addHook('onRequest', limit(limiter, 'api', options.api ?? '5/10 seconds;100/hour', identity));
    api.get('/hello', async (request) => ({ hello: API_KEYS.get(String(request.headers['x-api-key'] ?? '')) ?? 'anonymous' }));
  }, { prefix: '/api' });

  return { app, limiter };
}

async function fromEnv(): Promise<RedisClientLike> {
  const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  const client = process.env.REDIS_CLUSTER === '1' ? createCluster({ rootNodes: [{ url }] }) : createClient({ url });
  client.on('error', () => undefined); // the limiter reports outages itself: one warning, one recovery line
  await client.connect();
  return client as RedisClientLike;
}

if (require.main === module) {
  void (async () => {
    const { app } = await createApp({
      client: await fromEnv(),
      trustedProxies: (process.env.TRUSTED_PROXIES ?? '').split(',').map((s) => s.trim()).filter((s) => s !== ''),
      failOpen: process.env.FAIL_OPEN !== '0',
    });
    const port = Number(process.env.PORT ?? 3000);
    const host = process.env.HOST ?? '127.0.0.1';
    await app.listen({ port, host });
    console.log(`fastify gateway on http://${host}:${port}`);
  })();
}
