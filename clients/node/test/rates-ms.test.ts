/**
 * Rate strings are judged in milliseconds, on real servers (the module, and a server with the
 * Functions library only): at a steady rate r above a limit L per window W for T >= 10 W,
 * '5/second' lets through L * T / W +- (L + 1). Sent in seconds, as it was, a 1-second window
 * at 1-second resolution never slides and about half of that went through.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { SlidingWindowRateLimiter, limitsHeaders, rateLimitHeaders } from '../src';
import { connect, type Handle } from './helpers/clients';
import { kinds, startLibraryServer, startServer, type Server } from './helpers/servers';

const L = 5;
const W = 1; // seconds: '5/second'
const RATE = 3 * L / W; // requests per second
const N = 150; // T = N / RATE = 10 s = 10 W
const T = N / RATE;
const EXPECTED = (L * T) / W;
const START = 1_800_000_000_000; // an explicit `now` in ms: 2027-01-15, a whole second

/** n calls at `rate` per second, paced from the start; how many were allowed. */
async function steady(call: () => Promise<boolean>, n: number, rate: number): Promise<number> {
  let allowed = 0;
  const start = performance.now();
  for (let i = 0; i < n; i++) {
    const pause = start + (i * 1000) / rate - performance.now();
    if (pause > 0) await sleep(pause);
    if (await call()) allowed += 1;
  }
  return allowed;
}

for (const { name, skip } of kinds(['redis7'])) {
  for (const backend of ['module', 'library'] as const) {
    describe(`${name} ${backend}: '5/second' is sent in ms and slides`, { skip }, () => {
      let server: Server;
      let handle: Handle;
      before(async () => {
        server = backend === 'module' ? await startServer(name) : await startLibraryServer(name);
        handle = await connect('node-redis', server.port);
      });
      after(async () => {
        await handle?.close();
        await server?.cleanup();
      });

      test(`a steady ${RATE}/s for ${T} s on the server clock: L*T/W +- (L + 1) allowed`, async () => {
        const limiter = new SlidingWindowRateLimiter(handle.client as never, { backend, prefix: 'ms:' });
        const first = await limiter.checkLimits('probe', '5/second');
        assert.deepEqual([first.ms, first.summary.window, limiter.backend], [true, 1000, backend]);
        await assert.rejects(async () => limiter.checkLimits('probe', '5/second', { ms: true }),
          /a rate string carries its own unit/);
        // The machine is shared: a run whose calls stalled (unused quota) is tried again, 3 runs at the most.
        const runs: number[] = [];
        for (let attempt = 0; attempt < 3; attempt++) {
          runs.push(await steady(async () => (await limiter.checkLimits(`k${attempt}`, '5/second')).allowed, N, RATE));
          if (Math.abs(runs.at(-1)! - EXPECTED) <= L + 1) break;
        }
        console.log(`# ${name} ${backend}: '5/second' at ${RATE}/s for ${T} s: ${runs.join(', then ')} of ${N} allowed (band ${EXPECTED - L - 1}-${EXPECTED + L + 1})`);
        assert.ok(Math.abs(runs.at(-1)! - EXPECTED) <= L + 1, `${runs.join(', ')} allowed, expected ${EXPECTED} +- ${L + 1}`);
      });

      test('the same schedule as `now`: in the band in ms, far below it in seconds (as rate strings were sent)', async () => {
        const limiter = new SlidingWindowRateLimiter(handle.client as never, { backend, prefix: 'now:' });
        let ms = 0;
        let seconds = 0;
        for (let i = 0; i < N; i++) {
          const now = START + Math.round((i * 1000) / RATE);
          if ((await limiter.checkLimits('ms', '5/second', { now })).allowed) ms += 1;
          if ((await limiter.checkLimits('s', [[L, W]], { now: Math.floor(now / 1000) })).allowed) seconds += 1;
        }
        console.log(`# ${name} ${backend}: as \`now\`: ${ms} of ${N} allowed in ms, ${seconds} in seconds`);
        assert.ok(Math.abs(ms - EXPECTED) <= L + 1, `${ms} allowed in ms`);
        assert.ok(seconds < EXPECTED - L - 1, `${seconds} allowed in seconds`);
      });

      test('headers of a rate string speak seconds: names and w in whole seconds, Retry-After rounded up', async () => {
        const limiter = new SlidingWindowRateLimiter(handle.client as never, { backend, prefix: 'h:' });
        for (let i = 0; i < 10; i++) assert.ok((await limiter.checkLimits('k', '10/second;1000/hour', { now: START + 100 })).allowed);
        const refused = await limiter.checkLimits('k', '10/second;1000/hour', { now: START + 100 });
        assert.ok(!refused.allowed && refused.ms && refused.retryAfter > 0 && refused.retryAfter < 1000);
        const headers = limitsHeaders(refused, 'api');
        assert.equal(headers['RateLimit-Policy'], '"api/1s";q=10;w=1, "api/3600s";q=1000;w=3600');
        assert.equal(headers['Retry-After'], '1');
        const one = await limiter.checkLimits('one', '5/minute', { now: START });
        assert.equal(rateLimitHeaders(one.summary, 'api')['RateLimit-Policy'], '"api";q=5;w=60');
      });
    });
  }
}
