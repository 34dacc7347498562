/**
 * The example gateways (examples/express-gateway, examples/fastify-gateway) over real
 * HTTP on 127.0.0.1, against a real server: with the module and with the Functions library
 * alone, on every server kind (SW_NODE_KINDS narrows). Express runs on ioredis, Fastify on
 * node-redis. Each test builds its app with a fresh key prefix and small limits.
 */
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import * as expressGateway from '../examples/express-gateway/app';
import * as fastifyGateway from '../examples/fastify-gateway/app';
import type { RedisClientLike, SlidingWindowRateLimiter } from '../src';
import { connect, type Handle, type Lib } from './helpers/clients';
import { clearOfBoundary, listening } from './helpers/http';
import { TIMEOUT_MS } from './helpers/matrix';
import { ALL_KINDS, kinds, startLibraryServer, startServer, type Server } from './helpers/servers';

let seq = 0;

interface Config {
  trustedProxies?: string[];
  api?: string;
  report?: number; // per minute
  failures?: number; // failed logins per 15 minutes
}

interface Running {
  url: string;
  limiter: SlidingWindowRateLimiter;
  close(): Promise<void>;
}

interface Example {
  name: 'express' | 'fastify';
  lib: Lib;
  start(client: object, config: Config): Promise<Running>;
  /** The failed logins counted for `who` (an identity: ip:127.0.0.1). */
  failuresOf(limiter: SlidingWindowRateLimiter, who: string, failures: number): Promise<number>;
  /** A successful login is given back before its response leaves (else after: wait for it). */
  refundsBeforeReplying: boolean;
  /** The host library's draft header naming the report route's limit. */
  reportLimitHeader: [string, RegExp];
}

const FIFTEEN_MINUTES = 15 * 60_000;

/** PEEK counts the request it would be when it is allowed. */
const estimate = (r: { allowed: boolean; count: number }): number => (r.allowed ? r.count - 1 : r.count);

const EXAMPLES: Example[] = [
  {
    name: 'express',
    lib: 'ioredis',
    async start(client, c) {
      const { app, limiter } = expressGateway.createApp({
        client: client as RedisClientLike, prefix: `ex${seq++}:`, timeoutMs: TIMEOUT_MS, trustedProxies: c.trustedProxies,
        api: c.api, report: { limit: c.report ?? 2, windowMs: 60_000 },
        login: { failures: c.failures ?? 3, windowMs: FIFTEEN_MINUTES },
      });
      const http = await listening(app.listen(0, '127.0.0.1'));
      return { url: http.url, limiter, close: http.close };
    },
    async failuresOf(limiter, who, failures) {
      return estimate(await limiter.peek(`login:${who}`, failures, FIFTEEN_MINUTES, { ms: true }));
    },
    refundsBeforeReplying: false, // express-rate-limit decrements once the response has finished
    reportLimitHeader: ['ratelimit-policy', /^"2-in-1min"; q=2; w=60; pk=:[A-Za-z0-9+/=]+:$/],
  },
  {
    name: 'fastify',
    lib: 'node-redis',
    async start(client, c) {
      const { app, limiter } = await fastifyGateway.createApp({
        client: client as RedisClientLike, prefix: `fx${seq++}:`, timeoutMs: TIMEOUT_MS, trustedProxies: c.trustedProxies,
        api: c.api, report: { limit: c.report ?? 2, windowMs: 60_000 }, login: `${c.failures ?? 3}/15 minutes`,
      });
      await app.listen({ port: 0, host: '127.0.0.1' });
      return {
        url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`,
        limiter,
        close: async () => { await app.close(); },
      };
    },
    async failuresOf(limiter, who, failures) {
      // A rate string ('3/15 minutes'): its window is in ms.
      return estimate(await limiter.peek(`login:${who}`, failures, FIFTEEN_MINUTES, { ms: true }));
    },
    refundsBeforeReplying: true,
    reportLimitHeader: ['x-ratelimit-limit', /^2$/],
  },
];

type Headers = Record<string, string>;

function get(url: string, headers: Headers = {}): Promise<Response> {
  return fetch(url, { headers });
}

function login(url: string, password: string, headers: Headers = {}): Promise<Response> {
  return fetch(`${url}/api/login`, {
    method: 'POST', headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ user: 'alice', password }),
  });
}

/** The statuses of `n` requests sent one after another, `headers(i)` for the i-th. */
async function codes(n: number, send: (i: number) => Promise<Response>): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const r = await send(i);
    await r.arrayBuffer();
    out.push(r.status);
  }
  return out;
}

/**
 * Retry-After, whole seconds: at least 1, at most the window + 1 (requests made at the very
 * start of a window are refused until 1 s into the next one: in seconds, the previous
 * window's count is weighed (window - elapsed) / window and floored).
 */
function retryAfter(r: Response, windowSeconds: number): number {
  const value = Number(r.headers.get('retry-after'));
  assert.ok(Number.isInteger(value) && value >= 1 && value <= windowSeconds + 1, `Retry-After ${r.headers.get('retry-after')}`);
  return value;
}

function scenarios(example: Example, client: () => object): void {
  const run = async (config: Config, body: (app: Running) => Promise<void>): Promise<void> => {
    const app = await example.start(client(), config);
    try {
      await body(app);
    } finally {
      await app.close();
    }
  };

  test(`${example.name}: /api, two limits in one call: 429 exactly at the tighter, with X-RateLimit-*, Retry-After and draft-11 lists`, async () => {
    await run({ api: '4/minute;10/hour' }, async ({ url }) => {
      await clearOfBoundary(60_000, 5000);
      const first = await get(`${url}/api/hello`);
      assert.equal(first.status, 200);
      assert.deepEqual(await first.json(), { hello: 'anonymous' });
      assert.equal(first.headers.get('x-ratelimit-limit'), '4');
      assert.equal(first.headers.get('x-ratelimit-remaining'), '3');
      assert.equal(first.headers.get('ratelimit-policy'), '"api/60s";q=4;w=60, "api/3600s";q=10;w=3600');
      assert.match(first.headers.get('ratelimit') ?? '', /^"api\/60s";r=3;t=\d+, "api\/3600s";r=9;t=\d+$/);
      assert.equal(first.headers.get('retry-after'), null);
      assert.deepEqual(await codes(3, () => get(`${url}/api/hello`)), [200, 200, 200]);
      const refused = await get(`${url}/api/hello`);
      assert.equal(refused.status, 429);
      assert.match(refused.headers.get('content-type') ?? '', /^application\/json/);
      const body = await refused.json() as { error: string; policy: string; limit: number; retry_after: number };
      assert.deepEqual({ ...body, retry_after: 0 }, { error: 'rate_limited', policy: 'api', limit: 4, retry_after: 0 });
      assert.equal(retryAfter(refused, 60), body.retry_after);
      assert.equal(refused.headers.get('x-ratelimit-remaining'), '0');
      assert.match(refused.headers.get('ratelimit') ?? '', new RegExp(`^"api/60s";r=0;t=${body.retry_after}, "api/3600s";r=6;t=\\d+$`));
      // not limited, no headers
      const health = await get(`${url}/health`);
      assert.equal(health.status, 200);
      assert.equal(health.headers.get('x-ratelimit-limit'), null);
    });
  });

  test(`${example.name}: API keys are limited apart from addresses; invented keys count as the address`, async () => {
    await run({ api: '3/minute', report: 2 }, async ({ url, limiter }) => {
      await clearOfBoundary(60_000, 5000);
      const alice = { 'x-api-key': 'demo-key-1' };
      assert.deepEqual(await codes(4, () => get(`${url}/api/hello`, alice)), [200, 200, 200, 429]);
      assert.deepEqual(await codes(1, () => get(`${url}/api/hello`, { 'x-api-key': 'demo-key-2' })), [200]);
      assert.deepEqual(await codes(1, () => get(`${url}/api/hello`)), [200]);
      // An unknown key is no identity: counted by address, so inventing keys buys nothing.
      assert.deepEqual(await codes(3, (i) => get(`${url}/api/hello`, { 'x-api-key': `nope${i}` })), [200, 200, 429]);
      assert.equal(estimate(await limiter.peek('api:key:demo-key-1', 3, 60_000, { ms: true })), 3);
      assert.equal(estimate(await limiter.peek('api:key:demo-key-2', 3, 60_000, { ms: true })), 1);
      assert.equal(estimate(await limiter.peek('api:ip:127.0.0.1', 3, 60_000, { ms: true })), 3);
      // The route the host library limits: the same identities, its own headers.
      const first = await get(`${url}/api/report`, alice);
      assert.equal(first.status, 200);
      const [name, value] = example.reportLimitHeader;
      assert.match(first.headers.get(name) ?? '', value);
      assert.deepEqual(await codes(1, () => get(`${url}/api/report`, alice)), [200]);
      const refused = await get(`${url}/api/report`, alice);
      assert.equal(refused.status, 429);
      retryAfter(refused, 60);
      assert.deepEqual(await codes(3, () => get(`${url}/api/report`)), [200, 200, 429]);
      assert.deepEqual(await codes(2, () => get(`${url}/api/report`, { 'x-api-key': 'demo-key-2' })), [200, 200]);
    });
  });

  test(`${example.name}: a spoofed X-Forwarded-For from an untrusted peer changes nothing; behind a trusted proxy the real client counts`, async () => {
    await clearOfBoundary(60_000, 8000);
    // 127.0.0.1 is no trusted proxy here: whatever X-Forwarded-For it sends is its own text.
    await run({ trustedProxies: ['10.0.0.0/8'], api: '2/minute', report: 2, failures: 2 }, async ({ url, limiter }) => {
      const spoof = (i: number): Headers => ({ 'x-forwarded-for': `198.18.1.${i}` });
      assert.deepEqual(await codes(5, (i) => get(`${url}/api/hello`, spoof(i))), [200, 200, 429, 429, 429]);
      assert.deepEqual(await codes(3, (i) => get(`${url}/api/report`, spoof(i))), [200, 200, 429]);
      assert.deepEqual(await codes(3, (i) => login(url, 'wrong', spoof(i))), [401, 401, 429]);
      assert.equal(estimate(await limiter.peek('api:ip:127.0.0.1', 2, 60_000, { ms: true })), 2);
      assert.equal(estimate(await limiter.peek('api:ip:198.18.1.0', 2, 60_000, { ms: true })), 0);
      assert.equal(await example.failuresOf(limiter, 'ip:127.0.0.1', 2), 2);
    });
    // 127.0.0.1 plays our proxy: it appends the address it saw; what the client wrote left of it is ignored.
    await run({ trustedProxies: ['127.0.0.1/32'], api: '2/minute', failures: 2 }, async ({ url, limiter }) => {
      const via = (client: string, forged: string): Headers => ({ 'x-forwarded-for': `${forged}, ${client}` });
      assert.deepEqual(await codes(6, (i) => get(`${url}/api/hello`, via('203.0.113.7', `198.18.0.${i}`))),
        [200, 200, 429, 429, 429, 429]);
      assert.deepEqual(await codes(1, () => get(`${url}/api/hello`, { 'x-forwarded-for': '203.0.113.7' })), [429]);
      assert.deepEqual(await codes(1, () => get(`${url}/api/hello`, via('203.0.113.8', '203.0.113.7'))), [200]);
      assert.deepEqual(await codes(3, (i) => login(url, 'wrong', via('203.0.113.9', `198.18.2.${i}`))), [401, 401, 429]);
      assert.equal(estimate(await limiter.peek('api:ip:203.0.113.7', 2, 60_000, { ms: true })), 2);
      assert.equal(estimate(await limiter.peek('api:ip:203.0.113.8', 2, 60_000, { ms: true })), 1);
      assert.equal(estimate(await limiter.peek('api:ip:127.0.0.1', 2, 60_000, { ms: true })), 0);
      assert.equal(await example.failuresOf(limiter, 'ip:203.0.113.9', 2), 2);
    });
  });

  test(`${example.name}: /api/login counts only failures: 3 failed logins, then 429; successful logins never count`, async () => {
    await run({ failures: 3 }, async ({ url, limiter }) => {
      await clearOfBoundary(FIFTEEN_MINUTES, 10_000);
      const failures = (): Promise<number> => example.failuresOf(limiter, 'ip:127.0.0.1', 3);
      const settled = async (n: number): Promise<void> => {
        if (example.refundsBeforeReplying) { assert.equal(await failures(), n); return; }
        const deadline = Date.now() + 3000;
        while (await failures() !== n && Date.now() < deadline) await sleep(5);
        assert.equal(await failures(), n);
      };
      assert.deepEqual(await codes(2, () => login(url, 'wrong')), [401, 401]);
      for (let i = 0; i < 6; i++) {
        const ok = await login(url, 'wonderland');
        assert.equal(ok.status, 200, `successful login ${i + 1}`);
        assert.deepEqual(await ok.json(), { token: 'not-a-real-token' });
        await settled(2);
      }
      // counted by address whatever key is sent
      assert.deepEqual(await codes(1, () => login(url, 'wrong', { 'x-api-key': 'demo-key-1' })), [401]);
      await settled(3);
      const refused = await login(url, 'wrong');
      assert.equal(refused.status, 429);
      retryAfter(refused, 900);
      const body = await refused.json() as { error: string; policy: string };
      assert.equal(body.error, 'rate_limited');
      assert.equal(body.policy, 'login');
      // locked out: the right password too, until a failure leaves the window
      assert.deepEqual(await codes(2, () => login(url, 'wonderland')), [429, 429]);
      await settled(3);
    });
  });
}

for (const { name, skip } of kinds(ALL_KINDS)) {
  for (const backend of ['module', 'library'] as const) {
    describe(`example gateways [${name}] ${backend}`, { skip }, () => {
      let server: Server;
      const handles = new Map<Lib, Handle>();
      before(async () => {
        server = backend === 'module' ? await startServer(name) : await startLibraryServer(name);
        for (const lib of new Set(EXAMPLES.map((e) => e.lib))) handles.set(lib, await connect(lib, server.port));
      });
      after(async () => {
        for (const h of handles.values()) await h.close();
        await server.cleanup();
      });
      for (const example of EXAMPLES) {
        scenarios(example, () => {
          const handle = handles.get(example.lib);
          assert.ok(handle !== undefined, 'no client');
          return handle.client;
        });
      }
    });
  }
}
