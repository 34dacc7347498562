/**
 * Rate strings are judged in milliseconds, on real servers (the module, and a server with the
 * Functions library only): at a steady rate r above a limit L per window W for T >= 10 W,
 * '5/second' lets through L * T / W +- (L + 1). Sent in seconds, as it was, a 1-second window
 * at 1-second resolution never slides and about half of that went through.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { SlidingWindowRateLimiter } from '../src';
import { connect, type Handle } from './helpers/clients';
import { kinds, startLibraryServer, startServer, type Server } from './helpers/servers';

const L = 5;
const W = 1; // seconds: '5/second'
const RATE = 3 * L / W; // requests per second
const N = 150; // T = N / RATE = 10 s = 10 W
const T = N / RATE;

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

      test(`a steady ${RATE}/s for ${T} s: L*T/W +- (L + 1) allowed`, async () => {
        const limiter = new SlidingWindowRateLimiter(handle.client as never, { backend, prefix: 'ms:' });
        const first = await limiter.checkLimits('probe', '5/second');
        assert.deepEqual([first.ms, first.summary.window, limiter.backend], [true, 1000, backend]);
        await assert.rejects(async () => limiter.checkLimits('probe', '5/second', { ms: true }),
          /a rate string carries its own unit/);
        const allowed = await steady(async () => (await limiter.checkLimits('k', '5/second')).allowed, N, RATE);
        const expected = (L * T) / W;
        console.log(`# ${name} ${backend}: '5/second' at ${RATE}/s for ${T} s: ${allowed} of ${N} allowed (band ${expected - L - 1}-${expected + L + 1})`);
        assert.ok(Math.abs(allowed - expected) <= L + 1, `${allowed} allowed, expected ${expected} +- ${L + 1}`);
      });
    });
  }
}
