/**
 * @nestjs/throttler 6 over real HTTP (a NestJS app on Express) on the whole matrix
 * (helpers/matrix.ts): every server kind, module and library, ioredis and node-redis, one
 * node and a 3-master cluster.
 */
import 'reflect-metadata';
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Controller, Get, Module, type INestApplication } from '@nestjs/common';
import { APP_GUARD, NestFactory } from '@nestjs/core';
import { ThrottlerGuard, ThrottlerModule, type ThrottlerOptions } from '@nestjs/throttler';
import { SlidingWindowThrottlerStorage } from '../src';
import { acrossBoundary, clearOfBoundary, intoWindow, statuses } from './helpers/http';
import { TIMEOUT_MS, spreadOverMasters, storeMatrix, type Target } from './helpers/matrix';

/** The tracker: the x-user header (several identities), else the IP as the guard does by default. */
const byUser = (req: Record<string, unknown>): string => {
  const headers = req.headers as Record<string, string | undefined>;
  return headers['x-user'] ?? String(req.ip);
};

/** A Nest app with one route behind the global ThrottlerGuard (decorators applied by hand: no experimentalDecorators here). */
async function nestApp(storage: SlidingWindowThrottlerStorage, throttlers: ThrottlerOptions[]): Promise<{ url: string; app: INestApplication }> {
  class AppController { index(): string { return 'ok'; } }
  Reflect.decorate([Get()], AppController.prototype, 'index', Object.getOwnPropertyDescriptor(AppController.prototype, 'index'));
  Reflect.decorate([Controller()], AppController);
  class AppModule {}
  Reflect.decorate([Module({
    imports: [ThrottlerModule.forRoot({ throttlers, storage, getTracker: byUser })],
    controllers: [AppController],
    providers: [{ provide: APP_GUARD, useClass: ThrottlerGuard }],
  })], AppModule);
  const app = await NestFactory.create(AppModule, { logger: false });
  await app.listen(0, '127.0.0.1');
  const { port } = app.getHttpServer().address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}/`, app };
}

/** Identities for the spread over masters (8: all on one master of three has odds 1 in 2187). */
const USERS = Array.from({ length: 8 }, (_, i) => `user${i}`);

let seq = 0;

function nestScenarios(target: () => Target): void {
  const storage = (): SlidingWindowThrottlerStorage =>
    new SlidingWindowThrottlerStorage({ client: target().client, prefix: `n${seq++}:`, timeoutMs: TIMEOUT_MS });

  test('429 at exactly the limit for each identity, with its headers (X-RateLimit-*, Retry-After = blockDuration)', async () => {
    const s = storage();
    const { url, app } = await nestApp(s, [{ ttl: 60000, limit: 5 }]);
    const spread = await spreadOverMasters(target());
    await clearOfBoundary(60000, 5000); // 8 identities up to their limit in one window
    try {
      for (const user of USERS) {
        const headers = { 'x-user': user };
        const first = await fetch(url, { headers });
        assert.equal(first.status, 200);
        assert.equal(await first.text(), 'ok');
        assert.equal(first.headers.get('x-ratelimit-limit'), '5');
        assert.equal(first.headers.get('x-ratelimit-remaining'), '4');
        const reset = Number(first.headers.get('x-ratelimit-reset'));
        assert.ok(reset >= 1 && reset <= 120, `X-RateLimit-Reset ${reset}`);
        assert.deepEqual(await statuses(url, 5, user), [200, 200, 200, 200, 429], user);
        const refused = await fetch(url, { headers });
        assert.equal(refused.status, 429);
        assert.match(await refused.text(), /Too Many Requests/);
        const retry = Number(refused.headers.get('retry-after'));
        assert.ok(retry >= 59 && retry <= 60, `Retry-After ${retry} (the block: blockDuration defaults to ttl)`);
      }
      await spread(); // the counters and the block keys of 8 identities
    } finally {
      await app.close();
    }
  });

  test('sliding, not fixed: a burst across a window boundary is refused (blockDuration 0: the window alone)', async () => {
    const { url, app } = await nestApp(storage(), [{ ttl: 1000, limit: 4, blockDuration: 0 }]);
    try {
      // 4 in the last 300 ms of a window; just past the boundary (50 ms in, done by 200 ms)
      // the previous 4 still weigh floor(4 x 0.8) >= 3: one more passes (a run the machine
      // stalled out of these times is run again, up to 3 times).
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

  test('blockDuration: a refused key stays refused for blockDuration after the window allows again, then counts afresh', async () => {
    // Each burst of 3 starts just past a window boundary and must end before the next one (a
    // burst across one could let the third through: the sliding estimate drops as the window
    // moves on); a run a stalled machine pushed out of its times is run again, up to 3 times.
    const windowEnd = (): number => Date.now() - (Date.now() % 400) + 400;
    for (let attempt = 1; ; attempt++) {
      const last = attempt === 3;
      const { url, app } = await nestApp(storage(), [{ ttl: 400, limit: 2, blockDuration: 1800 }]);
      try {
        await intoWindow(400, 10);
        let end = windowEnd();
        const first = await statuses(url, 3);
        if (Date.now() >= end && !last) continue;
        assert.deepEqual(first, [200, 200, 429]);
        const blockedAt = Date.now();
        await sleep(900); // two windows later: the window alone would allow
        const during = await fetch(url);
        if (Date.now() - blockedAt < 1500) {
          assert.equal(during.status, 429);
          const retry = Number(during.headers.get('retry-after'));
          assert.ok(retry >= 1 && retry <= 2, `Retry-After ${retry}: ceil of the block key's PTTL (about 0.9 s)`);
        } else if (!last) continue; // stalled past the block: proves nothing
        await sleep(Math.max(0, blockedAt + 1900 - Date.now()));
        await intoWindow(400, 10);
        end = windowEnd();
        // the blocked requests were not counted: the full limit again
        const again = await statuses(url, 3);
        if (Date.now() >= end && !last) continue;
        assert.deepEqual(again, [200, 200, 429]);
        return;
      } finally {
        await app.close();
      }
    }
  });

  test('named throttlers: each its own window and headers (suffix -<name>)', async () => {
    const { url, app } = await nestApp(storage(), [
      { name: 'short', ttl: 60000, limit: 3 }, { name: 'long', ttl: 120000, limit: 10 }]);
    try {
      const first = await fetch(url);
      assert.equal(first.status, 200);
      assert.equal(first.headers.get('x-ratelimit-limit-short'), '3');
      assert.equal(first.headers.get('x-ratelimit-remaining-short'), '2');
      assert.equal(first.headers.get('x-ratelimit-limit-long'), '10');
      assert.equal(first.headers.get('x-ratelimit-remaining-long'), '9');
      assert.deepEqual(await statuses(url, 3), [200, 200, 429]);
      const refused = await fetch(url);
      assert.ok(refused.headers.get('retry-after-short') !== null, 'Retry-After-short');
    } finally {
      await app.close();
    }
  });
}

storeMatrix('@nestjs/throttler', (target) => nestScenarios(target));
