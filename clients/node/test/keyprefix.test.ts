/**
 * ioredis's `keyPrefix`: ioredis adds it only to the keys of commands it knows (FCALL, DEL,
 * PTTL, ...), not to SLIDINGWINDOW.*'s, so the adapter adds it to those. The module and the
 * library then name the same key, and a store's resetKey (DEL) removes what CHECK wrote.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import IORedis, { Cluster as IOCluster } from 'ioredis';
import { SlidingWindowRateLimiter, SlidingWindowStore, loadLibrary } from '../src';
import {
  kinds, rawCommand, startCluster, startLibraryServer, startServer, type Cluster, type Server,
} from './helpers/servers';

const KEY_PREFIX = 'kp:';

/** How many of `ports` hold `key`. */
async function holders(ports: number[], key: string): Promise<number> {
  const replies = await Promise.all(ports.map((p) => rawCommand(p, `EXISTS ${key}`)));
  return replies.filter((r) => r.trim() === ':1').length;
}

/** MOVED and CROSSSLOT errors answered so far, summed over `ports`. */
async function redirects(ports: number[]): Promise<number> {
  const infos = await Promise.all(ports.map((p) => rawCommand(p, 'INFO errorstats')));
  let n = 0;
  for (const info of infos) {
    for (const m of info.matchAll(/errorstat_(?:MOVED|CROSSSLOT):count=(\d+)/g)) n += Number(m[1]);
  }
  return n;
}

for (const { name, skip } of kinds(['redis7', 'valkey9'])) {
  for (const backend of ['module', 'library'] as const) {
    describe(`ioredis keyPrefix [${name}] ${backend}`, { skip }, () => {
      let server: Server;
      let client: IORedis;
      before(async () => {
        server = backend === 'module' ? await startServer(name) : await startLibraryServer(name);
        client = new IORedis({ port: server.port, host: '127.0.0.1', keyPrefix: KEY_PREFIX });
        client.on('error', () => undefined);
      });
      after(async () => { client.disconnect(); await server.cleanup(); });

      test('the limiter counts under the client\'s prefix; the store\'s resetKey removes that key', async () => {
        const limiter = new SlidingWindowRateLimiter(client, { prefix: 'lim:', backend });
        for (let i = 0; i < 3; i++) assert.ok((await limiter.check('id', 3, 60)).allowed);
        assert.equal((await limiter.check('id', 3, 60)).allowed, false);
        assert.equal(await holders([server.port], `${KEY_PREFIX}lim:id`), 1, 'the prefixed key is written');
        assert.equal(await holders([server.port], 'lim:id'), 0, 'no unprefixed key');
        assert.equal((await limiter.counts('id', 60)).current, 3);

        const store = new SlidingWindowStore({ client, prefix: 'st:' });
        store.init({ windowMs: 60000, limit: 5 } as Parameters<SlidingWindowStore['init']>[0]);
        assert.equal((await store.increment('who')).totalHits, 1);
        assert.equal(await holders([server.port], `${KEY_PREFIX}st:who`), 1);
        await store.resetKey('who');
        assert.equal(await holders([server.port], `${KEY_PREFIX}st:who`), 0, 'resetKey removed the key CHECK wrote');
        assert.equal((await store.increment('who')).totalHits, 1, 'counting starts again');
      });
    });
  }
}

for (const { name, skip } of kinds(['redis7'])) {
  for (const backend of ['module', 'library'] as const) {
    describe(`ioredis Cluster keyPrefix [${name}] ${backend}`, { skip }, () => {
      let cluster: Cluster;
      let client: IOCluster;
      before(async () => {
        cluster = await startCluster(name, { module: backend === 'module' });
        client = new IOCluster(cluster.ports.map((port) => ({ host: '127.0.0.1', port })), { keyPrefix: KEY_PREFIX });
        client.on('error', () => undefined);
        await new Promise<void>((ok, fail) => { client.once('ready', ok); client.once('error', fail); });
        if (backend === 'library') await loadLibrary(client);
      });
      after(async () => { client.disconnect(); await cluster.cleanup(); });

      test('each identity under the prefix, on the node of its prefixed key, no redirects', async () => {
        const before = await redirects(cluster.ports);
        const limiter = new SlidingWindowRateLimiter(client, { prefix: 'c:', backend });
        for (let i = 0; i < 12; i++) assert.ok((await limiter.check(`id${i}`, 5, 60)).allowed);
        // Counted before the EXISTS below, which nodes not holding a key answer with MOVED.
        assert.equal(await redirects(cluster.ports), before, 'no MOVED or CROSSSLOT answered to the limiter');
        for (let i = 0; i < 12; i++) {
          assert.equal(await holders(cluster.ports, `${KEY_PREFIX}c:id${i}`), 1, `id${i} under the prefix`);
          assert.equal(await holders(cluster.ports, `c:id${i}`), 0, `id${i} without it`);
        }
      });
    });
  }
}
