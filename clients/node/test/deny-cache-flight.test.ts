/**
 * The deny cache's single flight: concurrent calls on one key and limits with nothing cached
 * wait for one call's answer instead of all reaching Redis, and an allowed answer lets as many
 * waiters go at once as it left quota (the Python client's tests/test_deny_cache_flight.py).
 * Counted on the server (INFO commandstats); bounded by count.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { createClient } from 'redis';
import { SlidingWindowRateLimiter } from '../src';
import { kinds, rawCommand, startServer, type Server } from './helpers/servers';

const REQUESTS = 2000;
const CALLERS = 20;

async function checkCalls(port: number): Promise<number> {
  const info = await rawCommand(port, 'INFO commandstats', 2000);
  return Number(/cmdstat_slidingwindow\.check:calls=(\d+)/.exec(info)?.[1] ?? 0);
}

for (const { name, skip } of kinds(['redis7'])) {
  describe(`${name}: the deny cache's single flight`, { skip }, () => {
    let server: Server;
    let client: ReturnType<typeof createClient>;
    let inFlight = 0;
    let most = 0;
    /** The real client as a sendCommand function whose CHECKs take 20 ms longer (a slow link), counting how many are on their way. */
    const slow = async (...args: string[]): Promise<unknown> => {
      if (args[0] !== 'SLIDINGWINDOW.CHECK') return client.sendCommand(args);
      inFlight += 1;
      most = Math.max(most, inFlight);
      try {
        await sleep(20);
        return await client.sendCommand(args);
      } finally {
        inFlight -= 1;
      }
    };
    before(async () => {
      server = await startServer(name);
      client = createClient({ url: server.url });
      client.on('error', () => undefined);
      await client.connect();
    });
    after(async () => {
      client?.destroy();
      await server?.cleanup();
    });

    test(`a flood of ${REQUESTS} from one identity over ${CALLERS} callers (5 per 10 s) reaches Redis at most 10 times`, async () => {
      const limiter = new SlidingWindowRateLimiter(client, { denyCache: true, prefix: 'flood:' });
      const base = await checkCalls(server.port);
      let allowed = 0;
      await Promise.all(Array.from({ length: CALLERS }, async () => {
        for (let i = 0; i < REQUESTS / CALLERS; i++) if ((await limiter.check('one', 5, 10)).allowed) allowed += 1;
      }));
      const calls = (await checkCalls(server.port)) - base;
      console.log(`# ${REQUESTS} checks over ${CALLERS} callers: ${calls} CHECK calls, ${allowed} allowed, ${JSON.stringify(limiter.denyCache!.stats())}`);
      assert.equal(allowed, 5);
      assert.ok(calls <= 10, `${calls} CHECK calls`);
    });

    test('calls far from the limit are not held one at a time', async () => {
      most = 0;
      const limiter = new SlidingWindowRateLimiter(slow, { denyCache: true, prefix: 'roomy:' });
      const began = performance.now();
      const got = await Promise.all(Array.from({ length: CALLERS }, () => limiter.check('k', 1000, 60)));
      const took = performance.now() - began;
      assert.deepEqual(got.map((r) => r.allowed), Array(CALLERS).fill(true));
      assert.ok(most >= CALLERS / 2, `at most ${most} CHECKs at once`);
      assert.ok(took < CALLERS * 20, `${took} ms: one at a time`);
      assert.equal(limiter.denyCache!.size, 0);
    });

    test('near the limit the waiters are answered from one refusal', async () => {
      const limiter = new SlidingWindowRateLimiter(slow, { denyCache: true, prefix: 'tight:' });
      const base = await checkCalls(server.port);
      const got = await Promise.all(Array.from({ length: CALLERS }, () => limiter.check('k', 3, 60)));
      assert.equal(got.filter((r) => r.allowed).length, 3);
      assert.ok((await checkCalls(server.port)) - base <= 5);
    });
  });
}
