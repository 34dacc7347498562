/** The limiter on every server, through both client libraries, on both backends and on clusters. */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  BackendMissingError, LIBRARY_VERSION, LibraryNotLoadedError, MultiLimitResult, RateLimitResult,
  SlidingWindowRateLimiter, keySlot, limitsHeaders, loadLibrary, rateLimitHeaders,
} from '../src';
import { LIBS, connect, connectCluster, type Handle } from './helpers/clients';
import {
  ALL_KINDS, LIBRARY_KINDS, hasFunctions, kinds, rawCommand, startCluster, startLibraryKind, startLibraryServer,
  startServer, type Cluster, type Server,
} from './helpers/servers';

const backends = ['module', 'library'] as const;

/** The tests every backend, client and topology passes. */
function limiterTests(get: () => SlidingWindowRateLimiter, expected: 'module' | 'library'): void {
  test('counts up to the limit, then refuses; DETAILS typed', async () => {
    const l = get();
    const id = `a${Math.random()}`;
    for (let i = 1; i <= 3; i++) {
      const r = await l.check(id, 3, 10, { now: 100 });
      assert.ok(r instanceof RateLimitResult);
      assert.deepEqual([r.allowed, r.count, r.limit, r.remaining, r.retryAfter, r.degraded], [true, i, 3, 3 - i, -1, false]);
    }
    assert.equal(l.backend, expected);
    const refused = await l.check(id, 3, 10, { now: 100 });
    assert.deepEqual([refused.allowed, refused.count, refused.remaining], [false, 3, 0]);
    assert.ok(refused.retryAfter > 0);
    // retry_after is exact: one unit earlier still refused, at it allowed.
    assert.equal((await l.peek(id, 3, 10, { now: 100 + refused.retryAfter - 1 })).allowed, false);
    assert.equal((await l.peek(id, 3, 10, { now: 100 + refused.retryAfter })).allowed, true);
    // reset_after: the estimate is 0 then (a peek of cost 1 counts 1), not one unit before.
    assert.equal((await l.peek(id, 3, 10, { now: 100 + refused.resetAfter })).count, 1);
    assert.ok((await l.peek(id, 3, 10, { now: 100 + refused.resetAfter - 1 })).count > 1);
    const [allowed, count] = await l.isAllowed(id, 3, 10, { now: 100 });
    assert.deepEqual([allowed, count], [false, 3]);
  });

  test('sliding, not fixed: the previous window weighs into the next', async () => {
    const l = get();
    const id = `s${Math.random()}`;
    for (let i = 0; i < 10; i++) assert.ok((await l.check(id, 10, 10, { now: 109 })).allowed);
    // 5 s into the next window the previous 10 weigh 5: five more, not ten.
    let passed = 0;
    for (let i = 0; i < 10; i++) if ((await l.check(id, 10, 10, { now: 115 })).allowed) passed++;
    assert.equal(passed, 5);
  });

  test('peek counts nothing; refund gives back and answers as peek after', async () => {
    const l = get();
    const id = `p${Math.random()}`;
    assert.equal((await l.peek(id, 2, 60, { now: 5 })).count, 1);
    assert.equal((await l.peek(id, 2, 60, { now: 5 })).count, 1);
    await l.check(id, 2, 60, { now: 5 });
    await l.check(id, 2, 60, { now: 5 });
    assert.equal((await l.check(id, 2, 60, { now: 5 })).allowed, false);
    const back = await l.refund(id, 2, 60, { now: 5 });
    const peek = await l.peek(id, 2, 60, { now: 5 });
    assert.deepEqual(back, peek);
    assert.equal(peek.allowed, true);
    assert.equal((await l.counts(id, 60, { now: 5 })).current, 1);
  });

  test('several limits in one call: all or nothing, governing limit, each limit', async () => {
    const l = get();
    const id = `m${Math.random()}`;
    const first = await l.checkLimits(id, [[2, 1], [3, 60]], { now: 1000 });
    assert.ok(first instanceof MultiLimitResult);
    assert.deepEqual(first.limits.map((r) => [r.window, r.limit, r.count, r.remaining]), [[1, 2, 1, 1], [60, 3, 1, 2]]);
    assert.equal(first.governing, 0);
    await l.checkLimits(id, [[2, 1], [3, 60]], { now: 1000 });
    const refused = await l.checkLimits(id, [{ limit: 2, window: 1 }, { limit: 3, window: 60 }], { now: 1000 });
    assert.equal(refused.allowed, false);
    assert.equal(refused.governing, 0);
    assert.equal(refused.limits[1]!.allowed, true);
    // refused: nothing counted in the minute either
    assert.deepEqual(await l.counts(id, 60, { now: 1000 }), { previous: 0, current: 2, elapsed: 40, degraded: false });
    // two seconds later the per-second limit allows (one second later its full previous window still weighs); the minute's is the last one
    const third = await l.checkLimits(id, [[2, 1], [3, 60]], { now: 1002 });
    assert.equal(third.allowed, true);
    assert.equal(third.governing, 1);
    const fourth = await l.checkLimits(id, [[2, 1], [3, 60]], { now: 1002 });
    assert.equal(fourth.allowed, false);
    assert.equal(fourth.governing, 1);
    assert.equal(fourth.retryAfter, fourth.limits[1]!.retryAfter);
    const h = limitsHeaders(fourth, 'api');
    assert.equal(h['RateLimit-Policy'], '"api/1s";q=2;w=1, "api/60s";q=3;w=60');
    assert.equal(h['Retry-After'], String(fourth.retryAfter));
  });

  test('milliseconds and cost', async () => {
    const l = get();
    const id = `ms${Math.random()}`;
    const r = await l.check(id, 10, 1500, { ms: true, cost: 4, now: 3000 });
    assert.deepEqual([r.allowed, r.count, r.ms, r.window, r.windowSeconds], [true, 4, true, 1500, 2]);
    assert.equal((await l.check(id, 10, 1500, { ms: true, cost: 7, now: 3000 })).allowed, false);
    const never = await l.check(id, 10, 1500, { ms: true, cost: 11, now: 3000 });
    assert.equal(never.retryAfter, -1);
    assert.equal(rateLimitHeaders(never)['Retry-After'], undefined);
    const h = rateLimitHeaders(r, 'x');
    assert.equal(h['RateLimit'], `"x";r=6;t=${Math.ceil(r.resetAfter / 1000)}`);
  });

  test("the server's clock when now is left out", async () => {
    const l = get();
    const r = await l.check(`c${Math.random()}`, 5, 60);
    assert.deepEqual([r.allowed, r.count], [true, 1]);
  });

  test('errors that are no outage are thrown: ERR arguments, WRONGTYPE', async () => {
    const l = get();
    await assert.rejects(l.check('x', 1, 0), { message: /^ERR window must be an integer/ });
    await assert.rejects(l.checkLimits('x', [[1, 5], [2, 5]]), { message: /same window/ });
    assert.equal(l.circuit.down, false);
  });
}

for (const { name, skip } of kinds(ALL_KINDS)) {
  describe(`limiter [${name}]`, { skip }, () => {
    const servers: Partial<Record<(typeof backends)[number], Server>> = {};
    before(async () => {
      servers.module = await startServer(name);
      servers.library = await startLibraryServer(name);
    });
    after(async () => { await Promise.all(Object.values(servers).map((s) => s.cleanup())); });

    for (const backend of backends) {
      for (const lib of LIBS) {
        describe(`${backend} via ${lib}`, () => {
          let handle: Handle;
          let limiter: SlidingWindowRateLimiter;
          before(async () => {
            handle = await connect(lib, servers[backend]!.port);
            limiter = new SlidingWindowRateLimiter(handle.client, { prefix: `t:${lib}:` });
          });
          after(async () => { await handle.close(); });
          limiterTests(() => limiter, backend);

          test('WRONGTYPE is thrown', async () => {
            await rawCommand(servers[backend]!.port, `SET t:${lib}:str hello`);
            await assert.rejects(limiter.check('str', 1, 10), { message: /^WRONGTYPE/ });
          });
        });
      }
    }

    describe('a server with neither', () => {
      for (const lib of LIBS) {
        test(`auto loads the library itself; a user who may not gets LibraryNotLoadedError (${lib})`, async () => {
          const bare = await startServer(name, { module: false });
          const handle = await connect(lib, bare.port);
          try {
            const limiter = new SlidingWindowRateLimiter(handle.client);
            assert.equal((await limiter.check('k', 1, 10)).allowed, true);
            assert.equal(limiter.backend, 'library');
            assert.equal(limiter.backendState.loads, 1);
            await rawCommand(bare.port, 'FUNCTION FLUSH');
            await rawCommand(bare.port, 'ACL SETUSER app on >pw ~* +@all -function');
            const app = await connect(lib, bare.port, { username: 'app', password: 'pw' });
            try {
              const denied = new SlidingWindowRateLimiter(app.client);
              await assert.rejects(denied.check('k', 1, 10), (err: Error) => err instanceof LibraryNotLoadedError
                && err instanceof BackendMissingError && err.message.includes('FUNCTION LOAD REPLACE'));
              assert.equal(denied.circuit.down, false);
              assert.equal(await loadLibrary(handle.client), 1); // the operator
              assert.equal((await denied.check('k2', 1, 10)).allowed, true);
            } finally {
              await app.close();
            }
          } finally {
            await handle.close();
            await bare.cleanup();
          }
        });
      }
    });

    for (const backend of backends) {
      describe(`cluster, ${backend}`, () => {
        let cluster: Cluster;
        before(async () => {
          cluster = await startCluster(name, { module: backend === 'module' });
        });
        after(async () => { await cluster.cleanup(); });
        for (const lib of LIBS) {
          describe(`via ${lib}`, () => {
            let handle: Handle;
            let limiter: SlidingWindowRateLimiter;
            before(async () => {
              handle = await connectCluster(lib, cluster.ports);
              if (backend === 'library') assert.equal(await loadLibrary(handle.client), 3);
              limiter = new SlidingWindowRateLimiter(handle.client, { prefix: `c:${lib}:` });
            });
            after(async () => { await handle.close(); });
            limiterTests(() => limiter, backend);

            test('each key on its own node: keys land where CLUSTER KEYSLOT says, no redirects', async () => {
              for (let i = 0; i < 12; i++) await limiter.check(`spread${i}`, 5, 60);
              const slot = await rawCommand(cluster.ports[0]!, `CLUSTER KEYSLOT c:${lib}:spread7`);
              assert.equal(slot.trim(), `:${keySlot(`c:${lib}:spread7`)}`);
              const perNode = await Promise.all(cluster.ports.map((p) => rawCommand(p, 'DBSIZE')));
              assert.ok(perNode.filter((d) => d.trim() !== ':0').length >= 2, `keys on one node only: ${perNode}`);
              const errors = await Promise.all(cluster.ports.map((p) => rawCommand(p, 'INFO errorstats')));
              assert.ok(errors.every((e) => !e.includes('errorstat_MOVED')), errors.join(' '));
            });
          });
        }
      });
    }
  });
}


/**
 * The same tests on the library kinds: managed servers (no module, `enable-module-command
 * no`) and Redis 6.2 (EVALSHA), nothing loaded beforehand: the first limiter loads the
 * library itself (on every master of a cluster), the next one finds it.
 */
for (const { name, skip } of kinds(LIBRARY_KINDS)) {
  const mode = hasFunctions(name) ? 'function' : 'eval';
  describe(`limiter [${name}]`, { skip }, () => {
    let server: Server;
    before(async () => { server = await startLibraryKind(name); });
    after(async () => { await server.cleanup(); });

    for (const [i, lib] of LIBS.entries()) {
      describe(`library via ${lib}`, () => {
        let handle: Handle;
        let limiter: SlidingWindowRateLimiter;
        before(async () => {
          handle = await connect(lib, server.port);
          limiter = new SlidingWindowRateLimiter(handle.client, { prefix: `t:${lib}:` });
        });
        after(async () => { await handle.close(); });
        test(`the first call finds ${mode === 'eval' ? 'no FUNCTION: EVALSHA' : i === 0 ? 'no library and loads it' : 'the library loaded'}`, async () => {
          assert.equal(limiter.backend, 'auto');
          assert.equal((await limiter.check('first', 2, 60)).count, 1);
          assert.equal(limiter.backend, 'library');
          assert.equal(limiter.backendState.mode, mode);
          assert.equal(limiter.backendState.detections, 1);
          assert.equal(limiter.backendState.loads, mode === 'function' && i === 0 ? 1 : 0);
          if (mode === 'function') {
            assert.equal(await rawCommand(server.port, 'FCALL_RO slidingwindow_version 0'), `$${LIBRARY_VERSION.length}\r\n${LIBRARY_VERSION}\r\n`);
          }
        });
        limiterTests(() => limiter, 'library');

        test('WRONGTYPE is thrown', async () => {
          await rawCommand(server.port, `SET t:${lib}:str hello`);
          await assert.rejects(limiter.check('str', 1, 10), { message: /^WRONGTYPE/ });
        });
      });
    }

    describe('cluster, nothing loaded', () => {
      let cluster: Cluster;
      before(async () => { cluster = await startCluster(name, { module: false }); });
      after(async () => { await cluster.cleanup(); });
      for (const lib of LIBS) {
        describe(`via ${lib}`, () => {
          let handle: Handle;
          let limiter: SlidingWindowRateLimiter;
          before(async () => {
            handle = await connectCluster(lib, cluster.ports);
            limiter = new SlidingWindowRateLimiter(handle.client, { prefix: `c:${lib}:` });
          });
          after(async () => { await handle.close(); });
          test('the first call loads the library on every master (FUNCTION), or uses EVALSHA', async () => {
            assert.equal((await limiter.check('first', 2, 60)).count, 1);
            assert.equal(limiter.backendState.mode, mode);
            if (mode === 'function') {
              const versions = await Promise.all(cluster.ports.map((p) => rawCommand(p, 'FCALL_RO slidingwindow_version 0')));
              assert.deepEqual(versions, cluster.ports.map(() => `$${LIBRARY_VERSION.length}\r\n${LIBRARY_VERSION}\r\n`));
            }
          });
          limiterTests(() => limiter, 'library');

          test('each key on its own node, no redirects; FUNCTION FLUSH (SCRIPT FLUSH) on one master is healed', async () => {
            for (let i = 0; i < 12; i++) assert.equal((await limiter.check(`spread${i}`, 1, 60)).allowed, true);
            const perNode = await Promise.all(cluster.ports.map((p) => rawCommand(p, 'DBSIZE')));
            assert.ok(perNode.filter((d) => d.trim() !== ':0').length >= 2, `keys on one node only: ${perNode}`);
            await rawCommand(cluster.ports[1]!, mode === 'function' ? 'FUNCTION FLUSH' : 'SCRIPT FLUSH');
            for (let i = 0; i < 12; i++) assert.equal((await limiter.check(`spread${i}`, 1, 60)).allowed, false);
            const errors = await Promise.all(cluster.ports.map((p) => rawCommand(p, 'INFO errorstats')));
            assert.ok(errors.every((e) => !e.includes('errorstat_MOVED')), errors.join(' '));
            assert.equal(limiter.circuit.down, false);
            assert.equal(limiter.circuit.outages, 0);
          });
        });
      }
    });
  });
}
