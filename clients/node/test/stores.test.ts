/**
 * The stores over real HTTP, express-rate-limit 8 and @fastify/rate-limit 11, on the whole
 * matrix (helpers/matrix.ts): every server kind, module and library, ioredis and
 * node-redis, one node and a 3-master cluster.
 */
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import express from 'express';
import { rateLimit } from 'express-rate-limit';
import Fastify from 'fastify';
import fastifyRateLimit from '@fastify/rate-limit';
import { SlidingWindowStore, fastifyStore } from '../src';
import { acrossBoundary, clearOfBoundary, listening, statuses } from './helpers/http';
import { TIMEOUT_MS, spreadOverMasters, storeMatrix, type Cell, type Target } from './helpers/matrix';

let seq = 0;
/** A prefix no other test of this process uses. */
const fresh = (letter: string): string => `${letter}${seq++}:`;
/** Identities for the spread over masters (8: all on one master of three has odds 1 in 2187). */
const USERS = Array.from({ length: 8 }, (_, i) => `user${i}`);

async function listen(app: express.Express): Promise<{ url: string; close: () => Promise<void> }> {
  return listening(app.listen(0, '127.0.0.1'));
}

async function listenFastify(app: ReturnType<typeof Fastify>): Promise<string> {
  await app.listen({ port: 0, host: '127.0.0.1' });
  return `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
}

/** express-rate-limit's key: the x-user header (several identities), else the IP as it does by default. */
const byUser = (req: express.Request): string => req.get('x-user') ?? `ip:${req.socket.remoteAddress ?? ''}`;

/**
 * Waits (up to 3 s) until the store holds `hits` for `key`: express-rate-limit gives a
 * skipped request back after its response has finished, which a loaded machine may leave
 * for later than the next request.
 */
async function untilHits(store: SlidingWindowStore, key: string, hits: number): Promise<void> {
  const deadline = Date.now() + 3000;
  while ((await store.get(key))?.totalHits !== hits && Date.now() < deadline) await sleep(5);
}

function expressScenarios(target: () => Target, cell: Cell): void {
  const store = (limiterPrefix = fresh('e')): SlidingWindowStore =>
    new SlidingWindowStore({ client: target().client, prefix: limiterPrefix, timeoutMs: TIMEOUT_MS });

  test('express-rate-limit: 429 at exactly the limit for each identity, with its headers (draft-8, legacy, Retry-After)', async () => {
    const app = express();
    const s = store();
    app.use(rateLimit({ windowMs: 60000, limit: 5, standardHeaders: 'draft-8', legacyHeaders: true, store: s, keyGenerator: byUser }));
    app.get('/', (_req, res) => { res.send('ok'); });
    const http = await listen(app);
    const spread = await spreadOverMasters(target());
    await clearOfBoundary(60000, 5000); // 8 identities up to their limit in one window
    try {
      for (const user of USERS) {
        const first = await fetch(http.url, { headers: { 'x-user': user } });
        assert.equal(first.status, 200);
        assert.match(first.headers.get('ratelimit-policy') ?? '', /^"5-in-1min"; q=5; w=60; pk=:[A-Za-z0-9+/=]+:$/);
        assert.match(first.headers.get('ratelimit') ?? '', /^"5-in-1min"; r=4; t=\d+/);
        assert.equal(first.headers.get('x-ratelimit-remaining'), '4');
        assert.deepEqual(await statuses(http.url, 5, user), [200, 200, 200, 200, 429], user);
        const refused = await fetch(http.url, { headers: { 'x-user': user } });
        assert.equal(refused.status, 429);
        const retry = Number(refused.headers.get('retry-after'));
        assert.ok(retry >= 1 && retry <= 60, `Retry-After ${retry}`);
        assert.equal(refused.headers.get('x-ratelimit-remaining'), '0');
        // refused requests are not counted: the store still holds 5
        assert.equal((await s.get(user))?.totalHits, 5, user);
      }
      await spread();
    } finally {
      await http.close();
    }
  });

  test('express-rate-limit: sliding, not fixed: a burst across a window boundary is refused', async () => {
    const app = express();
    app.use(rateLimit({ windowMs: 1000, limit: 4, store: store(), keyGenerator: byUser }));
    app.get('/', (_req, res) => { res.send('ok'); });
    const http = await listen(app);
    try {
      // 4 in the last 300 ms of a window; just past the boundary (50 ms in, done by 200 ms)
      // the previous 4 still weigh floor(4 x 0.8) >= 3: one more passes, where a fixed
      // window would allow 4.
      const { late, early } = await acrossBoundary(1000, 700, 50, 200, (attempt) => ({
        late: () => statuses(http.url, 4, `slide${attempt}`),
        early: () => statuses(http.url, 3, `slide${attempt}`),
      }));
      assert.deepEqual(late, [200, 200, 200, 200]);
      assert.deepEqual(early, [200, 429, 429]);
    } finally {
      await http.close();
    }
  });

  test('express-rate-limit: skipFailedRequests counts only failures (decrement is a REFUND; 429s give nothing back)', async () => {
    const app = express();
    const s = store();
    app.use(rateLimit({ windowMs: 60000, limit: 3, skipFailedRequests: false, skipSuccessfulRequests: true, store: s, keyGenerator: byUser }));
    app.get('/ok', (_req, res) => { res.send('ok'); });
    app.get('/fail', (_req, res) => { res.status(401).send('no'); });
    const http = await listen(app);
    await clearOfBoundary(60000, 5000);
    try {
      for (let i = 0; i < 12; i++) {
        assert.deepEqual(await statuses(`${http.url}/ok`, 1, 'me'), [200]);
        await untilHits(s, 'me', 0); // the refund runs after the response
      }
      assert.deepEqual(await statuses(`${http.url}/fail`, 3, 'me'), [401, 401, 401]);
      assert.deepEqual(await statuses(`${http.url}/fail`, 2, 'me'), [429, 429]);
      assert.deepEqual(await statuses(`${http.url}/ok`, 2, 'me'), [429, 429]);
      assert.equal((await s.get('me'))?.totalHits, 3);
    } finally {
      await http.close();
    }
  });

  test('express-rate-limit: skipFailedRequests: failures are given back, a refused request gives back nothing', async () => {
    const app = express();
    const s = store();
    const limiter = rateLimit({ windowMs: 60000, limit: 2, skipFailedRequests: true, store: s, keyGenerator: byUser });
    app.use(limiter);
    app.get('/ok', (_req, res) => { res.send('ok'); });
    app.get('/fail', (_req, res) => { res.status(500).send('no'); });
    const http = await listen(app);
    await clearOfBoundary(60000, 5000);
    try {
      for (let i = 0; i < 5; i++) {
        assert.deepEqual(await statuses(`${http.url}/fail`, 1, 'me'), [500]);
        await untilHits(s, 'me', 0); // the refund runs after the response
      }
      assert.deepEqual(await statuses(`${http.url}/ok`, 2, 'me'), [200, 200]);
      for (let i = 0; i < 4; i++) {
        assert.deepEqual(await statuses(`${http.url}/ok`, 1, 'me'), [429]);
        await sleep(20);
      }
      assert.equal((await s.get('me'))?.totalHits, 2, 'the 429s (failed responses) must not refund the two counted requests');
      await limiter.resetKey('me');
      await sleep(20);
      assert.deepEqual(await statuses(`${http.url}/ok`, 1, 'me'), [200]);
    } finally {
      await http.close();
    }
  });

  test('express-rate-limit: draft-6 and draft-7 headers', async () => {
    for (const draft of ['draft-6', 'draft-7'] as const) {
      const app = express();
      app.use(rateLimit({ windowMs: 60000, limit: 5, standardHeaders: draft, legacyHeaders: false, store: store() }));
      app.get('/', (_req, res) => { res.send('ok'); });
      const http = await listen(app);
      try {
        const first = await fetch(http.url);
        assert.equal(first.status, 200);
        assert.equal(first.headers.get('ratelimit-policy'), '5;w=60', draft);
        assert.equal(first.headers.get('x-ratelimit-limit'), null);
        if (draft === 'draft-6') {
          assert.equal(first.headers.get('ratelimit-limit'), '5');
          assert.equal(first.headers.get('ratelimit-remaining'), '4');
          const reset = Number(first.headers.get('ratelimit-reset'));
          assert.ok(reset >= 1 && reset <= 120, `RateLimit-Reset ${reset}`);
        } else {
          assert.match(first.headers.get('ratelimit') ?? '', /^limit=5, remaining=4, reset=\d+$/);
        }
        assert.deepEqual(await statuses(http.url, 5), [200, 200, 200, 200, 429]);
      } finally {
        await http.close();
      }
    }
  });

  test('express-rate-limit with a limit function: counted under maxLimit, refused requests count too (documented)', async () => {
    const app = express();
    app.use(rateLimit({ windowMs: 60000, limit: (req) => (req.path === '/low' ? 2 : 4), store: store() }));
    app.get('/low', (_req, res) => { res.send('low'); });
    app.get('/high', (_req, res) => { res.send('high'); });
    const http = await listen(app);
    try {
      assert.deepEqual(await statuses(`${http.url}/low`, 3), [200, 200, 429]);
      // the same key (the IP) holds 3 now, the refused one included: one more under 4
      assert.deepEqual(await statuses(`${http.url}/high`, 2), [200, 429]);
    } finally {
      await http.close();
    }
  });

  const sendCommandSkip = cell.lib !== 'node-redis' ? 'node-redis only (ioredis has call())'
    : cell.topology === 'cluster' ? 'one node only (a cluster client routes by key: pass it as client)' : false;
  test('express-rate-limit with sendCommand', { skip: sendCommandSkip }, async () => {
    const client = target().client as { sendCommand(args: string[]): Promise<unknown> };
    const app = express();
    app.use(rateLimit({ windowMs: 60000, limit: 2, store: new SlidingWindowStore({
      sendCommand: (...args: string[]) => client.sendCommand(args), prefix: fresh('e'), timeoutMs: TIMEOUT_MS }) }));
    app.get('/', (_req, res) => { res.send('ok'); });
    const http = await listen(app);
    try {
      assert.deepEqual(await statuses(http.url, 3), [200, 200, 429]);
    } finally {
      await http.close();
    }
  });
}

function fastifyScenarios(target: () => Target): void {
  const storeClass = (): ReturnType<typeof fastifyStore> => fastifyStore({ client: target().client, prefix: fresh('f'), timeoutMs: TIMEOUT_MS });
  const keyGenerator = (req: { headers: Record<string, unknown>; ip: string }): string =>
    typeof req.headers['x-user'] === 'string' ? req.headers['x-user'] : req.ip;

  test('@fastify/rate-limit store: read is a PEEK (counts nothing), incr counts', async () => {
    const Store = storeClass();
    const store = new Store();
    const call = (fn: 'incr' | 'read'): Promise<{ current: number; ttl: number }> => new Promise((ok, fail) => {
      store[fn]('k', (err, r) => { if (err !== null) fail(err); else ok(r!); }, 60000, 3);
    });
    assert.equal((await call('read')).current, 0);
    assert.equal((await call('incr')).current, 1);
    assert.equal((await call('incr')).current, 2);
    const read = await call('read');
    assert.equal(read.current, 2);
    assert.ok(read.ttl > 0 && read.ttl <= 120000, `ttl ${read.ttl}`);
    assert.equal((await call('read')).current, 2, 'a read counts nothing');
    assert.equal((await call('incr')).current, 3);
    assert.equal((await call('incr')).current, 4, 'refused: max + 1');
    assert.equal((await call('read')).current, 3, 'the refused incr was not counted');
  });

  test('@fastify/rate-limit: 429 at exactly the limit for each identity, with its headers; each route apart (child)', async () => {
    const app = Fastify();
    await app.register(fastifyRateLimit, { max: 3, timeWindow: 60000, store: storeClass(), keyGenerator });
    app.get('/a', async () => 'a');
    app.get('/b', { config: { rateLimit: { max: 1, timeWindow: 60000 } } }, async () => 'b');
    const url = await listenFastify(app);
    const spread = await spreadOverMasters(target());
    await clearOfBoundary(60000, 5000); // 8 identities up to their limit in one window
    try {
      for (const user of USERS) {
        const headers = { 'x-user': user };
        const first = await fetch(`${url}/a`, { headers });
        assert.equal(first.status, 200);
        assert.equal(first.headers.get('x-ratelimit-limit'), '3');
        assert.equal(first.headers.get('x-ratelimit-remaining'), '2');
        assert.deepEqual(await statuses(`${url}/a`, 3, user), [200, 200, 429], user);
        const refused = await fetch(`${url}/a`, { headers });
        assert.equal(refused.status, 429);
        const retry = Number(refused.headers.get('retry-after'));
        assert.ok(retry >= 1 && retry <= 60, `retry-after ${retry}`);
        assert.deepEqual(await statuses(`${url}/b`, 2, user), [200, 429], user);
      }
      await spread();
    } finally {
      await app.close();
    }
  });

  test('@fastify/rate-limit: sliding, not fixed: a burst across a window boundary is refused', async () => {
    const app = Fastify();
    await app.register(fastifyRateLimit, { max: 4, timeWindow: 1000, store: storeClass(), keyGenerator });
    app.get('/', async () => 'ok');
    const url = `${await listenFastify(app)}/`;
    try {
      const { late, early } = await acrossBoundary(1000, 700, 50, 200, (attempt) => ({
        late: () => statuses(url, 4, `slide${attempt}`),
        early: () => statuses(url, 3, `slide${attempt}`),
      }));
      assert.deepEqual(late, [200, 200, 200, 200]);
      assert.deepEqual(early, [200, 429, 429]);
    } finally {
      await app.close();
    }
  });
}

storeMatrix('stores', (target, cell) => {
  expressScenarios(target, cell);
  fastifyScenarios(target);
});
