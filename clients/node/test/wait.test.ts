/**
 * wait: sleeping exactly retryAfter, on the server's clock, never past the timeout (the
 * Python client's tests/test_wait.py, case for case), on a real server, module and library.
 *
 * With whole seconds and a 1-second window, "2 per second" means at most 2 requests in any
 * two consecutive seconds (the previous second weighs fully at every whole second). So from
 * just after a second boundary s0, sequential waiters get through at s0, s0, then, after one
 * refusal with retryAfter 2 and a sleep of exactly 2 s, at s0+2, s0+2: 4 in 2 s, the most
 * that limit allows. A fifth, with a 500 ms timeout, sleeps 500 ms and gives up refused.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { SlidingWindowRateLimiter, pauseBeforeRetry, RateLimitResult, type SendCommandFn } from '../src';
import { connect, type Handle } from './helpers/clients';
import { kinds, startLibraryServer, startServer, type Server } from './helpers/servers';

/** A real client's sendCommand that counts the checks it sends (to show there is no busy loop). */
function counting(handle: Handle): { send: SendCommandFn; checks: () => number } {
  let checks = 0;
  const client = handle.client as { sendCommand(args: string[]): Promise<unknown> };
  const send: SendCommandFn = (...args) => {
    if (args[0] === 'SLIDINGWINDOW.CHECK' || args[1] === 'slidingwindow_check') checks++;
    return client.sendCommand(args);
  };
  return { send, checks: () => checks };
}

async function toSecondBoundary(send: SendCommandFn): Promise<void> {
  const [, micros] = (await send('TIME')) as [string, string];
  await sleep(1030 - Number(micros) / 1000);
}

test('pauseBeforeRetry: the exact retry_after in ms, cut to the time left; none when there is nothing to wait for', () => {
  const denied = (retry: number, ms: boolean, degraded = false): RateLimitResult =>
    new RateLimitResult(false, 2, 2, 0, retry, 5, 10, ms, degraded);
  assert.equal(pauseBeforeRetry(denied(2, false), 10_000), 2000);
  assert.equal(pauseBeforeRetry(denied(2, false), 500), 500);
  assert.equal(pauseBeforeRetry(denied(250, true), 10_000), 250);
  assert.equal(pauseBeforeRetry(denied(-1, false), 10_000), undefined); // cost > limit: never
  assert.equal(pauseBeforeRetry(denied(2, false, true), 10_000), undefined); // fail-closed outage
  assert.equal(pauseBeforeRetry(denied(2, false), 0), undefined);
  assert.equal(pauseBeforeRetry(new RateLimitResult(true, 1, 2, 1, -1, 5, 10, false), 10_000), undefined);
});

for (const backend of ['module', 'library'] as const) {
  for (const kind of kinds(['redis7'])) {
    describe(`wait on ${kind.name}, ${backend}`, { skip: kind.skip }, () => {
      let server: Server;
      let handle: Handle;
      before(async () => {
        server = backend === 'module' ? await startServer(kind.name) : await startLibraryServer(kind.name);
        handle = await connect('node-redis', server.port);
      });
      after(async () => {
        await handle?.close();
        await server?.cleanup();
      });

      test('lets exactly the limit through, sleeping exactly retryAfter; gives up at the timeout', async () => {
        const { send, checks } = counting(handle);
        const limiter = new SlidingWindowRateLimiter(send, { prefix: `w${Math.random()}:`, backend, timeoutMs: 5000 });
        await toSecondBoundary(send);
        let started = performance.now();
        const results: RateLimitResult[] = [];
        for (let i = 0; i < 4; i++) results.push(await limiter.wait('job', 2, 1, { timeoutMs: 10_000 }));
        const span = performance.now() - started;
        assert.deepEqual(results.map((r) => [r.allowed, r.count]), [[true, 1], [true, 2], [true, 1], [true, 2]]);
        assert.equal(checks(), 5); // one refusal, one exact sleep, then allowed: no busy loop
        assert.ok(span >= 2000 && span < 3000, `${span} ms`);

        started = performance.now();
        const gaveUp = await limiter.wait('job', 2, 1, { timeoutMs: 500 });
        const waited = performance.now() - started;
        assert.deepEqual([gaveUp.allowed, gaveUp.degraded], [false, false]);
        assert.ok(gaveUp.retryAfter >= 1);
        assert.equal(checks(), 7); // refused, slept the 500 ms left, refused again: returned
        assert.ok(waited >= 495 && waited < 1500, `${waited} ms`);
        assert.equal((await limiter.wait('job', 2, 1, { timeoutMs: 0 })).allowed, false);
        assert.equal(checks(), 8);
      });

      test('returns at once when it can never pass (cost > limit)', async () => {
        const { send, checks } = counting(handle);
        const limiter = new SlidingWindowRateLimiter(send, { prefix: `w${Math.random()}:`, backend, timeoutMs: 5000 });
        const started = performance.now();
        const never = await limiter.wait('big', 3, 60, { timeoutMs: 30_000, cost: 4 });
        assert.deepEqual([never.allowed, never.retryAfter], [false, -1]);
        assert.ok(checks() === 1 && performance.now() - started < 5000);
      });

      test('ms windows: sleeps retryAfter milliseconds', async () => {
        const { send, checks } = counting(handle);
        const limiter = new SlidingWindowRateLimiter(send, { prefix: `w${Math.random()}:`, backend, timeoutMs: 5000 });
        // Allowed again from the next 300 ms window on (the previous one then weighs < 1):
        // anywhere from 1 to 300 ms away, which PEEK tells (a new id when the check and the
        // peek fell on two sides of a window's end).
        let id = '';
        let ahead = -1;
        for (let attempt = 0; attempt < 5 && ahead < 0; attempt++) {
          id = `fast${attempt}`;
          assert.ok((await limiter.check(id, 1, 300, { ms: true })).allowed);
          ahead = (await limiter.peek(id, 1, 300, { ms: true })).retryAfter;
        }
        assert.ok(ahead >= 1 && ahead <= 300, `${ahead}`);
        const before = checks();
        const started = performance.now();
        const r = await limiter.wait(id, 1, 300, { timeoutMs: 5000, ms: true });
        const waited = performance.now() - started;
        assert.equal(r.allowed, true);
        const sent = checks() - before;
        assert.ok(sent >= 2 && sent <= 3, `${sent} checks`); // a refusal, then allowed (at most one more)
        assert.ok(waited >= ahead - 50 && waited < ahead + 500, `waited ${waited} ms, retryAfter ${ahead} ms`);
      });
    });
  }
}

test('wait with fail-closed and Redis down: the degraded refusal at once, no sleep', async () => {
  const down: SendCommandFn = () => Promise.reject(Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }));
  const limiter = new SlidingWindowRateLimiter(down, { failOpen: false, backend: 'module', logger: { warn: () => undefined, error: () => undefined } });
  const started = performance.now();
  const r = await limiter.wait('x', 1, 60, { timeoutMs: 10_000 });
  assert.deepEqual([r.allowed, r.degraded], [false, true]);
  assert.ok(performance.now() - started < 1000);
});
