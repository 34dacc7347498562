/**
 * The limiter's timeouts with one timer per limiter (src/timeouts.ts): each call is bounded
 * by its own deadline, whatever the calls around it do; a reply in time is passed on, a
 * late one ignored; and with nothing pending the timer keeps no process alive. (The
 * limiter's timeout against a frozen server is in outage.test.ts.)
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { RedisTimeoutError } from '../src';
import { Timeouts } from '../src/timeouts';

function never(): Promise<unknown> {
  return new Promise(() => undefined);
}

test('a call that never settles is rejected at its deadline, not before', async () => {
  const t = new Timeouts(100);
  const start = performance.now();
  await assert.rejects(t.bound(never()), (err: unknown) => err instanceof RedisTimeoutError && err.timeoutMs === 100);
  const took = performance.now() - start;
  assert.ok(took >= 99 && took < 400, `rejected after ${took} ms`);
});

test('replies and failures in time are passed on; a late one is ignored', async () => {
  const t = new Timeouts(100);
  assert.equal(await t.bound(Promise.resolve('ok')), 'ok');
  await assert.rejects(t.bound(Promise.reject(new Error('boom'))), /boom/);
  let late: (v: string) => void = () => undefined;
  const slow = t.bound(new Promise<string>((ok) => { late = ok; }));
  await assert.rejects(slow, RedisTimeoutError);
  late('too late'); // settles nothing and throws nothing
  let failLate: (e: Error) => void = () => undefined;
  const failing = t.bound(new Promise<string>((_, fail) => { failLate = fail; }));
  await assert.rejects(failing, RedisTimeoutError);
  failLate(new Error('late failure')); // no unhandled rejection (the test runner would fail on one)
  await sleep(10);
});

test('each call keeps its own deadline while others start and settle around it', async () => {
  const t = new Timeouts(150);
  const results: Array<[number, number]> = [];
  const starts: Promise<void>[] = [];
  for (let i = 0; i < 5; i++) {
    // One call that never settles every 40 ms, with settled calls between (the timer is
    // then armed for a settled call's deadline first).
    await t.bound(Promise.resolve(i));
    const begun = performance.now();
    starts.push(t.bound(never()).then(() => assert.fail('resolved'),
      (err: unknown) => { assert.ok(err instanceof RedisTimeoutError); results.push([i, performance.now() - begun]); }));
    await sleep(40);
  }
  await Promise.all(starts);
  assert.deepEqual(results.map(([i]) => i), [0, 1, 2, 3, 4]);
  for (const [i, took] of results) assert.ok(took >= 149 && took < 450, `call ${i} rejected after ${took} ms`);
});

test('with no call pending the timer does not keep the process alive', () => {
  // A child that settles one call and then has nothing else to do exits at once, not after the timeout.
  const script = `const { Timeouts } = require(${JSON.stringify(join(__dirname, '..', 'src', 'timeouts.js'))});
    const t = new Timeouts(5000);
    t.bound(Promise.resolve(1)).then(() => { globalThis.started = performance.now(); });`;
  const started = performance.now();
  const run = spawnSync(process.execPath, ['-e', script], { timeout: 20_000 });
  const took = performance.now() - started;
  assert.equal(run.status, 0, String(run.stderr));
  assert.ok(took < 4000, `the child ran for ${took} ms (the timeout is 5000)`);
});
