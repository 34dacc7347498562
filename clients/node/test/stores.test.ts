/** The stores, each over real HTTP against a real server: express-rate-limit 8 and @fastify/rate-limit 11. */
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import express from 'express';
import { rateLimit } from 'express-rate-limit';
import Fastify from 'fastify';
import fastifyRateLimit from '@fastify/rate-limit';
import { SlidingWindowStore, fastifyStore } from '../src';
import { connect, type Handle, type Lib } from './helpers/clients';
import { BASE_KINDS, kinds, startLibraryServer, startServer, type Server } from './helpers/servers';

async function listen(app: express.Express): Promise<{ url: string; close: () => Promise<void> }> {
  const server = app.listen(0, '127.0.0.1');
  await new Promise((ok) => server.once('listening', ok));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, close: () => new Promise((ok) => server.close(() => ok())) };
}

async function statuses(url: string, n: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) out.push((await fetch(url)).status);
  return out;
}

/** Waits until `ms` into a window of `windowMs` (the server's windows start at multiples of it; same clock here). */
async function intoWindow(windowMs: number, ms: number): Promise<void> {
  const at = Date.now() % windowMs;
  await sleep(at <= ms ? ms - at : windowMs - at + ms);
}

let seq = 0;

for (const { name, skip } of kinds(BASE_KINDS)) {
  for (const backend of ['module', 'library'] as const) {
    for (const lib of ['ioredis', 'node-redis'] as Lib[]) {
      describe(`stores [${name}] ${backend} via ${lib}`, { skip }, () => {
        let server: Server;
        let handle: Handle;
        before(async () => {
          server = backend === 'module' ? await startServer(name) : await startLibraryServer(name);
          handle = await connect(lib, server.port);
        });
        after(async () => { await handle.close(); await server.cleanup(); });

        test('express-rate-limit: 429 at exactly the limit, with its headers (draft-8, legacy, Retry-After)', async () => {
          const app = express();
          const store = new SlidingWindowStore({ client: handle.client, prefix: `e${seq++}:` });
          app.use(rateLimit({ windowMs: 60000, limit: 5, standardHeaders: 'draft-8', legacyHeaders: true, store }));
          app.get('/', (_req, res) => { res.send('ok'); });
          const http = await listen(app);
          try {
            const first = await fetch(http.url);
            assert.equal(first.status, 200);
            assert.match(first.headers.get('ratelimit-policy') ?? '', /^"5-in-1min"; q=5; w=60; pk=:[A-Za-z0-9+/=]+:$/);
            assert.match(first.headers.get('ratelimit') ?? '', /^"5-in-1min"; r=4; t=\d+/);
            assert.equal(first.headers.get('x-ratelimit-remaining'), '4');
            assert.deepEqual(await statuses(http.url, 5), [200, 200, 200, 200, 429]);
            const refused = await fetch(http.url);
            assert.equal(refused.status, 429);
            const retry = Number(refused.headers.get('retry-after'));
            assert.ok(retry >= 1 && retry <= 60, `Retry-After ${retry}`);
            assert.equal(refused.headers.get('x-ratelimit-remaining'), '0');
            // refused requests are not counted: the store still holds 5
            const hits = await Promise.all(['::ffff:127.0.0.1', '127.0.0.1'].map(async (k) => (await store.get(k))?.totalHits ?? 0));
            assert.equal(Math.max(...hits), 5);
          } finally {
            await http.close();
          }
        });

        test('express-rate-limit: sliding, not fixed: a burst across a window boundary is refused', async () => {
          const app = express();
          app.use(rateLimit({ windowMs: 1000, limit: 4, store: new SlidingWindowStore({ client: handle.client, prefix: `e${seq++}:` }) }));
          app.get('/', (_req, res) => { res.send('ok'); });
          const http = await listen(app);
          try {
            await intoWindow(1000, 800);
            assert.deepEqual(await statuses(http.url, 4), [200, 200, 200, 200]);
            // Just past the boundary the previous 4 still weigh floor(4 x 0.95) = 3: one more
            // passes, where a fixed window would allow 4.
            await intoWindow(1000, 50);
            assert.deepEqual(await statuses(http.url, 3), [200, 429, 429]);
          } finally {
            await http.close();
          }
        });

        test('express-rate-limit: skipFailedRequests counts only failures (decrement is a REFUND; 429s give nothing back)', async () => {
          const app = express();
          const store = new SlidingWindowStore({ client: handle.client, prefix: `e${seq++}:` });
          app.use(rateLimit({ windowMs: 60000, limit: 3, skipFailedRequests: false, skipSuccessfulRequests: true, store }));
          app.get('/ok', (_req, res) => { res.send('ok'); });
          app.get('/fail', (_req, res) => { res.status(401).send('no'); });
          const http = await listen(app);
          try {
            for (let i = 0; i < 3; i++) {
              assert.deepEqual(await statuses(`${http.url}/ok`, 4), [200, 200, 200, 200]);
              await sleep(30); // the refund runs after the response
            }
            assert.deepEqual(await statuses(`${http.url}/fail`, 3), [401, 401, 401]);
            assert.deepEqual(await statuses(`${http.url}/fail`, 2), [429, 429]);
            assert.deepEqual(await statuses(`${http.url}/ok`, 2), [429, 429]);
          } finally {
            await http.close();
          }
        });

        test('express-rate-limit: skipFailedRequests: failures are given back, a refused request gives back nothing', async () => {
          const app = express();
          const store = new SlidingWindowStore({ client: handle.client, prefix: `e${seq++}:` });
          const limiter = rateLimit({ windowMs: 60000, limit: 2, skipFailedRequests: true, store });
          app.use(limiter);
          app.get('/ok', (_req, res) => { res.send('ok'); });
          app.get('/fail', (_req, res) => { res.status(500).send('no'); });
          const http = await listen(app);
          try {
            assert.deepEqual(await statuses(`${http.url}/fail`, 5), [500, 500, 500, 500, 500]);
            await sleep(50);
            assert.deepEqual(await statuses(`${http.url}/ok`, 2), [200, 200]);
            for (let i = 0; i < 4; i++) {
              assert.deepEqual(await statuses(`${http.url}/ok`, 1), [429]);
              await sleep(20);
            }
            const keys = ['::ffff:127.0.0.1', '127.0.0.1'];
            const hits = (await Promise.all(keys.map((k) => store.get(k)))).map((i) => i?.totalHits ?? 0);
            assert.equal(Math.max(...hits), 2, 'the 429s (failed responses) must not refund the two counted requests');
            for (const k of keys) await limiter.resetKey(k);
            await sleep(20);
            assert.deepEqual(await statuses(`${http.url}/ok`, 1), [200]);
          } finally {
            await http.close();
          }
        });

        test('express-rate-limit: draft-6 and draft-7 headers', async () => {
          for (const draft of ['draft-6', 'draft-7'] as const) {
            const app = express();
            app.use(rateLimit({ windowMs: 60000, limit: 5, standardHeaders: draft, legacyHeaders: false,
              store: new SlidingWindowStore({ client: handle.client, prefix: `e${seq++}:` }) }));
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
          app.use(rateLimit({ windowMs: 60000, limit: (req) => (req.path === '/low' ? 2 : 4),
            store: new SlidingWindowStore({ client: handle.client, prefix: `e${seq++}:` }) }));
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

        test('@fastify/rate-limit store: read is a PEEK (counts nothing), incr counts', async () => {
          const Store = fastifyStore({ client: handle.client, prefix: `f${seq++}:` });
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

        test('express-rate-limit with sendCommand', { skip: lib !== 'node-redis' }, async () => {
          const client = handle.client as { sendCommand(args: string[]): Promise<unknown> };
          const app = express();
          app.use(rateLimit({ windowMs: 60000, limit: 2, store: new SlidingWindowStore({
            sendCommand: (...args: string[]) => client.sendCommand(args), prefix: `e${seq++}:` }) }));
          app.get('/', (_req, res) => { res.send('ok'); });
          const http = await listen(app);
          try {
            assert.deepEqual(await statuses(http.url, 3), [200, 200, 429]);
          } finally {
            await http.close();
          }
        });

        test('@fastify/rate-limit: 429 at exactly the limit with its headers; each route apart (child)', async () => {
          const app = Fastify();
          await app.register(fastifyRateLimit as never, { max: 3, timeWindow: 60000, store: fastifyStore({ client: handle.client, prefix: `f${seq++}:` }) });
          app.get('/a', async () => 'a');
          app.get('/b', { config: { rateLimit: { max: 1, timeWindow: 60000 } } }, async () => 'b');
          await app.listen({ port: 0, host: '127.0.0.1' });
          const { port } = app.server.address() as AddressInfo;
          const url = `http://127.0.0.1:${port}`;
          try {
            const first = await fetch(`${url}/a`);
            assert.equal(first.status, 200);
            assert.equal(first.headers.get('x-ratelimit-limit'), '3');
            assert.equal(first.headers.get('x-ratelimit-remaining'), '2');
            assert.deepEqual(await statuses(`${url}/a`, 3), [200, 200, 429]);
            const refused = await fetch(`${url}/a`);
            assert.equal(refused.status, 429);
            const retry = Number(refused.headers.get('retry-after'));
            assert.ok(retry >= 1 && retry <= 60, `retry-after ${retry}`);
            assert.deepEqual(await statuses(`${url}/b`, 2), [200, 429]);
          } finally {
            await app.close();
          }
        });

        test('@fastify/rate-limit: sliding, not fixed: a burst across a window boundary is refused', async () => {
          const app = Fastify();
          await app.register(fastifyRateLimit as never, { max: 4, timeWindow: 1000, store: fastifyStore({ client: handle.client, prefix: `f${seq++}:` }) });
          app.get('/', async () => 'ok');
          await app.listen({ port: 0, host: '127.0.0.1' });
          const { port } = app.server.address() as AddressInfo;
          try {
            await intoWindow(1000, 800);
            assert.deepEqual(await statuses(`http://127.0.0.1:${port}/`, 4), [200, 200, 200, 200]);
            await intoWindow(1000, 50);
            assert.deepEqual(await statuses(`http://127.0.0.1:${port}/`, 3), [200, 429, 429]);
          } finally {
            await app.close();
          }
        });
      });
    }
  }
}
