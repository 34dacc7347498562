/** @nestjs/throttler 6 over real HTTP (a NestJS app on Express) against a real server. */
import 'reflect-metadata';
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Controller, Get, Module, type INestApplication } from '@nestjs/common';
import { APP_GUARD, NestFactory } from '@nestjs/core';
import { ThrottlerGuard, ThrottlerModule, type ThrottlerOptions } from '@nestjs/throttler';
import { SlidingWindowThrottlerStorage } from '../src';
import { connect, type Handle, type Lib } from './helpers/clients';
import { BASE_KINDS, kinds, startLibraryServer, startServer, type Server } from './helpers/servers';

/** A Nest app with one route behind the global ThrottlerGuard (decorators applied by hand: no experimentalDecorators here). */
async function nestApp(storage: SlidingWindowThrottlerStorage, throttlers: ThrottlerOptions[]): Promise<{ url: string; app: INestApplication }> {
  class AppController { index(): string { return 'ok'; } }
  Reflect.decorate([Get()], AppController.prototype, 'index', Object.getOwnPropertyDescriptor(AppController.prototype, 'index'));
  Reflect.decorate([Controller()], AppController);
  class AppModule {}
  Reflect.decorate([Module({
    imports: [ThrottlerModule.forRoot({ throttlers, storage })],
    controllers: [AppController],
    providers: [{ provide: APP_GUARD, useClass: ThrottlerGuard }],
  })], AppModule);
  const app = await NestFactory.create(AppModule, { logger: false });
  await app.listen(0, '127.0.0.1');
  const { port } = app.getHttpServer().address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}/`, app };
}

async function statuses(url: string, n: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) out.push((await fetch(url)).status);
  return out;
}

async function intoWindow(windowMs: number, ms: number): Promise<void> {
  const at = Date.now() % windowMs;
  await sleep(at <= ms ? ms - at : windowMs - at + ms);
}

let seq = 0;

for (const { name, skip } of kinds(BASE_KINDS)) {
  for (const backend of ['module', 'library'] as const) {
    for (const lib of ['ioredis', 'node-redis'] as Lib[]) {
      describe(`@nestjs/throttler [${name}] ${backend} via ${lib}`, { skip }, () => {
        let server: Server;
        let handle: Handle;
        before(async () => {
          server = backend === 'module' ? await startServer(name) : await startLibraryServer(name);
          handle = await connect(lib, server.port);
        });
        after(async () => { await handle.close(); await server.cleanup(); });
        const storage = (): SlidingWindowThrottlerStorage =>
          new SlidingWindowThrottlerStorage({ client: handle.client, prefix: `n${seq++}:` });

        test('429 at exactly the limit, with its headers (X-RateLimit-*, Retry-After = blockDuration)', async () => {
          const { url, app } = await nestApp(storage(), [{ ttl: 60000, limit: 5 }]);
          try {
            const first = await fetch(url);
            assert.equal(first.status, 200);
            assert.equal(await first.text(), 'ok');
            assert.equal(first.headers.get('x-ratelimit-limit'), '5');
            assert.equal(first.headers.get('x-ratelimit-remaining'), '4');
            const reset = Number(first.headers.get('x-ratelimit-reset'));
            assert.ok(reset >= 1 && reset <= 120, `X-RateLimit-Reset ${reset}`);
            assert.deepEqual(await statuses(url, 5), [200, 200, 200, 200, 429]);
            const refused = await fetch(url);
            assert.equal(refused.status, 429);
            assert.match(await refused.text(), /Too Many Requests/);
            const retry = Number(refused.headers.get('retry-after'));
            assert.ok(retry >= 59 && retry <= 60, `Retry-After ${retry} (the block: blockDuration defaults to ttl)`);
          } finally {
            await app.close();
          }
        });

        test('sliding, not fixed: a burst across a window boundary is refused (blockDuration 0: the window alone)', async () => {
          const { url, app } = await nestApp(storage(), [{ ttl: 2000, limit: 4, blockDuration: 0 }]);
          try {
            await intoWindow(2000, 1400);
            assert.deepEqual(await statuses(url, 4), [200, 200, 200, 200]);
            // Just past the boundary the previous 4 still weigh floor(4 x 0.95) = 3 (still 3 up to
            // 500 ms in: slack for a loaded machine): one more passes.
            await intoWindow(2000, 100);
            assert.deepEqual(await statuses(url, 3), [200, 429, 429]);
          } finally {
            await app.close();
          }
        });

        test('blockDuration: a refused key stays refused for blockDuration after the window allows again, then counts afresh', async () => {
          const s = storage();
          const { url, app } = await nestApp(s, [{ ttl: 300, limit: 2, blockDuration: 3000 }]);
          try {
            assert.deepEqual(await statuses(url, 3), [200, 200, 429]);
            const blockedAt = Date.now();
            await sleep(800); // two windows later: the window alone would allow
            const during = await fetch(url);
            if (Date.now() - blockedAt < 2800) { // a machine stalled for 2 s proves nothing here
              assert.equal(during.status, 429);
              const retry = Number(during.headers.get('retry-after'));
              assert.ok(retry >= 1 && retry <= 3, `Retry-After ${retry}: ceil of the block key's PTTL (about 2.2 s)`);
            }
            await sleep(Math.max(0, blockedAt + 3100 - Date.now()));
            // the blocked requests were not counted: the full limit again
            assert.deepEqual(await statuses(url, 3), [200, 200, 429]);
          } finally {
            await app.close();
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
      });
    }
  }
}
