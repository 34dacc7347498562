/**
 * Outages, through both client libraries at their defaults: after one failed call every
 * call is answered at once without Redis (fail-open by default, fail-closed when chosen),
 * one probe at a time in the background, one warning and one recovery line; and each row
 * of the table of which errors are outages, produced by a real server in that state.
 */
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import IORedis from 'ioredis';
import { SlidingWindowRateLimiter, isOutage, type Logger } from '../src';
import { LIBS, connect, type Handle, type Lib } from './helpers/clients';
import { BASE_KINDS, kinds, rawCommand, startServer, type KindName, type Server } from './helpers/servers';

class Lines implements Logger {
  warnings: string[] = [];
  errors: string[] = [];
  warn(m: string): void { this.warnings.push(m); }
  error(m: string): void { this.errors.push(m); }
}

function clientReady(client: object): boolean {
  const c = client as { status?: string; isReady?: boolean };
  return c.status === 'ready' || c.isReady === true;
}

async function until(what: string, ok: () => boolean | Promise<boolean>, ms = 8000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await ok())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

function scenario(kind: KindName, lib: Lib): void {
  for (const failOpen of [true, false]) {
    test(`server stopped, then back: fail-${failOpen ? 'open' : 'closed'} at once, one probe at a time, one warning, one recovery line (${lib})`, async () => {
      const server = await startServer(kind);
      const handle = await connect(lib, server.port);
      const log = new Lines();
      const errors: Error[] = [];
      const limiter = new SlidingWindowRateLimiter(handle.client, {
        failOpen, logger: log, probeIntervalMs: 300, onError: (e) => errors.push(e),
      });
      try {
        assert.equal((await limiter.check('o', 5, 60)).degraded, false);
        await server.stop();
        const stopped = performance.now();
        const first = await limiter.check('o', 5, 60);
        assert.deepEqual([first.allowed, first.degraded], [failOpen, true]);
        assert.equal(log.warnings.length, 1);
        assert.match(log.warnings[0]!, failOpen ? /Redis unavailable .*allowing \(fail-open\)/ : /denying \(fail-closed\)/);
        // 1,000 calls answered without Redis: no waiting on each, no second warning.
        const t0 = performance.now();
        for (let i = 0; i < 1000; i++) {
          const r = await limiter.check('o', 5, 60);
          assert.deepEqual([r.allowed, r.degraded], [failOpen, true]);
        }
        assert.ok(performance.now() - t0 < 1000, `1000 calls took ${performance.now() - t0} ms`);
        // Concurrent calls while a probe is due start one probe only.
        await sleep(350);
        const before = limiter.circuit.probes;
        await Promise.all(Array.from({ length: 16 }, () => limiter.check('o', 5, 60)));
        assert.equal(limiter.circuit.probes - before, 1);
        assert.equal(limiter.circuit.probing, true);
        assert.equal(log.warnings.length, 1);
        assert.ok(errors.length >= 1);
        // An outage of 3 s, a call every 10 ms (a probe every 300 ms, failing): the client's
        // own reconnect backoff has grown (node-redis: 1.6 s then 2 s waits plus up to 200 ms
        // of jitter, ioredis: about 0.5 s).
        while (performance.now() - stopped < 3000) {
          assert.equal((await limiter.check('o', 5, 60)).degraded, true);
          await sleep(10);
        }
        await server.start();
        const back = performance.now();
        await until('recovery', async () => !(await limiter.check('o', 5, 60)).degraded, 10000);
        const resumedMs = performance.now() - back;
        assert.equal(log.warnings.length, 2);
        assert.match(log.warnings[1]!, /Redis reachable again after \d+\.\ds; \d+ requests were answered without it/);
        assert.equal(limiter.circuit.outages, 1);
        console.log(`# ${kind} ${lib}: limiting resumed ${(resumedMs / 1000).toFixed(2)} s after the server was back`);
        // Within one probe interval of the server answering again, whatever the client's own
        // reconnect delay; margin 250 ms (the spare connection's connect and PEEK, the 20 ms
        // polling, a shared 2-core machine).
        assert.ok(resumedMs <= 300 + 250, `limiting resumed ${resumedMs.toFixed(0)} ms after the server was back`);
        // The probes were PEEKs: nothing was counted behind the callers' backs. (The restarted
        // server kept nothing; the recovered CHECK counts 1, and the first failed CHECK, queued
        // in the client's offline queue, may be sent on reconnect: 1 more. PEEK adds its cost.)
        const count = (await limiter.peek('o', 5, 60)).count;
        assert.ok(count === 2 || count === 3, `count ${count}`);
        // The client reconnects by itself, after its backoff; then the limiter's spare
        // connection is closed with no call needed (an open one would keep a process that
        // is shutting down alive): on the server, only the client's connection and this
        // CLIENT LIST's. From then on the calls go through the client.
        await until('the client reconnected', () => clientReady(handle.client), 10000);
        await until('the spare connection closed',
          async () => (await rawCommand(server.port, 'CLIENT LIST')).split('id=').length - 1 === 2, 2000);
        assert.equal((await limiter.check('o', 5, 60)).degraded, false);
      } finally {
        await handle.close();
        await server.cleanup();
      }
    });
  }

  test(`the server stopped again while the spare connection carries the calls: a second outage, nothing thrown (${lib})`, async (t) => {
    const server = await startServer(kind);
    const handle = await connect(lib, server.port);
    const log = new Lines();
    const limiter = new SlidingWindowRateLimiter(handle.client, { logger: log, probeIntervalMs: 200 });
    try {
      await limiter.check('b', 5, 60);
      await server.stop();
      const stopped = performance.now();
      while (performance.now() - stopped < 3000) {
        assert.equal((await limiter.check('b', 5, 60)).degraded, true);
        await sleep(10);
      }
      await server.start();
      await until('recovery', async () => !(await limiter.check('b', 5, 60)).degraded);
      if (clientReady(handle.client)) {
        t.skip('the client reconnected before the spare connection was needed');
        return;
      }
      await server.stop();
      await until('the second outage', async () => (await limiter.check('b', 5, 60)).degraded);
      assert.equal(limiter.circuit.outages, 2);
      assert.equal(log.warnings.length, 3);
      await server.start();
      await until('recovery', async () => !(await limiter.check('b', 5, 60)).degraded);
      assert.equal(log.warnings.length, 4);
    } finally {
      await handle.close();
      await server.cleanup();
    }
  });

  test(`server frozen (SIGSTOP): the call times out after timeoutMs, then answers at once (${lib})`, async () => {
    const server = await startServer(kind);
    const handle = await connect(lib, server.port);
    const log = new Lines();
    const limiter = new SlidingWindowRateLimiter(handle.client, { logger: log, timeoutMs: 300 });
    try {
      await limiter.check('f', 5, 60);
      server.pause();
      const t0 = performance.now();
      assert.equal((await limiter.check('f', 5, 60)).degraded, true);
      const firstMs = performance.now() - t0;
      assert.ok(firstMs >= 290 && firstMs < 1500, `first call ${firstMs} ms`);
      assert.match(log.warnings[0]!, /RedisTimeoutError: no reply from Redis within 300 ms/);
      const t1 = performance.now();
      for (let i = 0; i < 100; i++) assert.equal((await limiter.check('f', 5, 60)).degraded, true);
      assert.ok(performance.now() - t1 < 200);
      server.resume();
      await until('recovery', async () => !(await limiter.check('f', 5, 60)).degraded);
      assert.equal(log.warnings.length, 2);
    } finally {
      server.resume();
      await handle.close();
      await server.cleanup();
    }
  });
}

/** Each row of the table: the server state, and whether the limiter answers degraded (outage) or throws. */
function table(kind: KindName, lib: Lib): void {
  const servers: Server[] = [];
  const handles: Handle[] = [];
  after(async () => {
    await Promise.all(handles.map((h) => h.close()));
    await Promise.all(servers.map((s) => s.cleanup()));
  });
  async function server(extra: string[] = [], module = true): Promise<Server> {
    const s = await startServer(kind, { extra, module });
    servers.push(s);
    return s;
  }
  async function limiterOn(port: number, options: { password?: string; username?: string } = {}) {
    const h = await connect(lib, port, options);
    handles.push(h);
    return new SlidingWindowRateLimiter(h.client, { logger: new Lines() });
  }
  async function outage(l: SlidingWindowRateLimiter, re: RegExp, peek = false): Promise<void> {
    const errors: Error[] = [];
    (l.circuit as { onError: unknown }).onError = (e: Error) => errors.push(e);
    const r = await (peek ? l.peek('row', 5, 60) : l.check('row', 5, 60));
    assert.equal(r.degraded, true, 'expected an outage');
    assert.equal(l.circuit.down, true);
    assert.match(`${errors[0]?.name}: ${errors[0]?.message}`, re);
  }

  test(`LOADING is an outage (${lib})`, async () => {
    const s = await server();
    const filler = new IORedis({ port: s.port });
    const pipe = filler.pipeline();
    for (let i = 0; i < 3000; i++) pipe.set(`fill:${i}`, 'x');
    await pipe.exec();
    await filler.call('SAVE');
    filler.disconnect();
    await s.stop();
    // 0.5 ms per key: about 1.5 s of loading, answering clients every KiB meanwhile.
    await s.start(['--key-load-delay', '500', '--loading-process-events-interval-bytes', '1024']);
    assert.match(await rawCommand(s.port, 'PING'), /^-LOADING/);
    // ioredis waits for the end of LOADING before sending (its ready check), so the call times
    // out; node-redis sends and gets the LOADING reply.
    const l = await limiterOn(s.port);
    await outage(l, lib === 'ioredis' ? /LOADING|RedisTimeoutError/ : /LOADING/);
  });

  test(`READONLY (a replica) is an outage (${lib})`, async () => {
    const master = await server();
    const replica = await server(['--replicaof', '127.0.0.1', String(master.port)]);
    await outage(await limiterOn(replica.port), /READONLY/);
  });

  test(`MASTERDOWN (a replica cut off, replica-serve-stale-data no) is an outage (${lib})`, async () => {
    const master = await server();
    const replica = await server(['--replicaof', '127.0.0.1', String(master.port), '--replica-serve-stale-data', 'no']);
    await master.stop();
    await until('link down', async () => (await rawCommand(replica.port, 'PING')).startsWith('-MASTERDOWN'));
    // Even a PEEK (a read, which a replica serves) is refused: CHECK would get READONLY first.
    await outage(await limiterOn(replica.port), /MASTERDOWN/, true);
  });

  test(`CLUSTERDOWN (slots not served) is an outage (${lib})`, async () => {
    const node = await server(['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf']);
    await outage(await limiterOn(node.port), /CLUSTERDOWN/);
  });

  test(`OOM (maxmemory under noeviction) is an outage (${lib})`, async () => {
    const s = await server();
    const l = await limiterOn(s.port);
    await rawCommand(s.port, 'CONFIG SET maxmemory 1');
    await outage(l, /OOM/);
  });

  test(`TRYAGAIN is classified as an outage (a real reply, from MGET on a migrating slot) (${lib})`, async () => {
    // CHECK takes one key, so it is answered ASK, never TRYAGAIN: the reply comes from MGET.
    const node = await server(['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf']);
    const other = await server(['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf']);
    const c = new IORedis({ port: node.port });
    try {
      await c.call('CLUSTER', 'ADDSLOTSRANGE', '0', '16383');
      await c.call('CLUSTER', 'MEET', '127.0.0.1', String(other.port));
      const o = new IORedis({ port: other.port });
      const otherId = String(await o.call('CLUSTER', 'MYID'));
      o.disconnect();
      await until('meet', async () => String(await c.call('CLUSTER', 'NODES')).includes(otherId));
      await until('cluster ok', async () => String(await c.call('CLUSTER', 'INFO')).includes('cluster_state:ok'));
      const slot = String(await c.call('CLUSTER', 'KEYSLOT', '{t}a'));
      await c.set('{t}a', '1');
      await c.call('CLUSTER', 'SETSLOT', slot, 'MIGRATING', otherId);
      const err = await c.call('MGET', '{t}a', '{t}b').then(() => undefined, (e: unknown) => e);
      assert.ok(err instanceof Error && /^TRYAGAIN/.test(err.message), String(err));
      assert.equal(isOutage(err), true);
    } finally {
      c.disconnect();
    }
  });

  test(`NOAUTH is thrown, not an outage (${lib})`, async () => {
    const s = await server(['--requirepass', 'sekrit']);
    const l = await limiterOn(s.port);
    await assert.rejects(l.check('row', 5, 60), { message: /^NOAUTH/ });
    assert.equal(l.circuit.down, false);
  });

  test(`WRONGPASS is thrown, not an outage (${lib})`, async () => {
    const s = await server(['--requirepass', 'sekrit']);
    if (lib === 'node-redis') {
      // node-redis authenticates in connect(), which rejects (and at its defaults retries for
      // ever, so here without reconnecting): the limiter never gets a working client.
      const { createClient } = await import('redis');
      const c = createClient({ url: `redis://default:wrong@127.0.0.1:${s.port}`, socket: { reconnectStrategy: false } });
      c.on('error', () => undefined);
      await assert.rejects(c.connect(), { message: /^WRONGPASS/ });
      return;
    }
    const l = await limiterOn(s.port, { password: 'wrong' });
    await assert.rejects(l.check('row', 5, 60), { message: /^(WRONGPASS|NOAUTH)/ });
    assert.equal(l.circuit.down, false);
  });

  test(`NOPERM is thrown, not an outage (${lib})`, async () => {
    const s = await server();
    await rawCommand(s.port, 'ACL SETUSER app on >pw ~allowed:* +@all');
    const l = await limiterOn(s.port, { username: 'app', password: 'pw' });
    await assert.rejects(l.check('row', 5, 60), { message: /^NOPERM/ });
    assert.equal(l.circuit.down, false);
    assert.equal((await new SlidingWindowRateLimiter(handles.at(-1)!.client, { prefix: 'allowed:' }).check('x', 5, 60)).allowed, true);
  });
}

for (const { name, skip } of kinds(BASE_KINDS)) {
  describe(`outages [${name}]`, { skip }, () => {
    for (const lib of LIBS) {
      describe(`circuit via ${lib}`, () => scenario(name, lib));
      describe(`which errors are outages, via ${lib}`, () => table(name, lib));
    }
  });
}

describe('classification without a server', () => {
  test('socket errors are outages, other errors are not', () => {
    const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' });
    assert.equal(isOutage(refused), true);
    assert.equal(isOutage(new TypeError('x is not a function')), false);
    assert.equal(isOutage('LOADING'), false);
  });
});

