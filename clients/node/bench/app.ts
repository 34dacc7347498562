/**
 * One app of the client benchmark: bench/harness (`make bench-node-e2e`) starts it as
 *
 *     node build/bench/app.js <variant> <redis host:port> <limit> <window s>
 *
 * and it prints `PORT n` once it listens on 127.0.0.1:n, then serves GET / ("ok") behind
 * the variant's limiter, keyed by the X-Id header, answering 429 with Retry-After when
 * refused. Every limiter gets the same limit per window and the same ioredis client at its
 * defaults; ours runs at its defaults (the deny cache on).
 *
 *   express-none               Express 5, no limiter
 *   express-slidingwindow      express-rate-limit 8 + our SlidingWindowStore
 *   express-slidingwindow-nocache  the same with the store's deny cache off
 *   express-rate-limit-redis   express-rate-limit 8 + rate-limit-redis (its EVALSHA script)
 *   fastify-none               Fastify 5, no limiter
 *   fastify-slidingwindow      @fastify/rate-limit 11 + our fastifyStore
 *   fastify-slidingwindow-nocache  the same with the store's deny cache off
 *   fastify-redis              @fastify/rate-limit 11 + its built-in Redis store (ioredis)
 *
 * `<variant>-before` (ours only): the same app on another build of this client, the build
 * directory's `src` in $BENCH_NODE_BEFORE (e.g. a copy of build/src made before a change,
 * beside a copy of lua/), to measure a change against what it replaced in one alternating
 * run (the harness gives it no library row: its name does not end in "slidingwindow").
 *
 * Under `node --cpu-prof` the app writes its profile when stopped by SIGTERM or SIGINT
 * (the harness's SIGKILL leaves none: profile a running app loaded by `harness load`).
 */
import { join } from 'node:path';
import IORedis from 'ioredis';

type Client = typeof import('../src');

/** Our client: this build's, or the one in $BENCH_NODE_BEFORE for a `-before` variant. */
function client(before: boolean): Promise<Client> {
  if (!before) return import('../src');
  const dir = process.env.BENCH_NODE_BEFORE;
  if (dir === undefined || dir === '') throw new Error('a -before variant needs BENCH_NODE_BEFORE (a build of this client)');
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return Promise.resolve(require(join(dir, 'index.js')) as Client);
}

export const VARIANTS = ['express-none', 'express-slidingwindow', 'express-slidingwindow-nocache', 'express-rate-limit-redis',
  'fastify-none', 'fastify-slidingwindow', 'fastify-slidingwindow-nocache', 'fastify-redis'] as const;
export type Variant = (typeof VARIANTS)[number];

interface Listening { port: number; close(): Promise<void> }

function header(value: string | string[] | undefined): string {
  return typeof value === 'string' ? value : value?.[0] ?? '';
}

async function express(variant: Variant, before: boolean, redis: IORedis, limit: number, windowS: number): Promise<Listening> {
  const make = (await import('express')).default;
  const app = make();
  if (variant !== 'express-none') {
    const { rateLimit } = await import('express-rate-limit');
    let store;
    if (variant === 'express-slidingwindow' || variant === 'express-slidingwindow-nocache') {
      const { SlidingWindowStore } = await client(before);
      store = new SlidingWindowStore({ client: redis, denyCache: variant === 'express-slidingwindow' });
    } else {
      const { RedisStore } = await import('rate-limit-redis');
      store = new RedisStore({ sendCommand: (command: string, ...args: string[]) => redis.call(command, ...args) as never });
    }
    app.use(rateLimit({ windowMs: windowS * 1000, limit, standardHeaders: 'draft-8', legacyHeaders: false,
      keyGenerator: (req) => header(req.headers['x-id']), store }));
  }
  app.get('/', (_req, res) => { res.send('ok'); });
  return new Promise((ok, fail) => {
    const server = app.listen(0, '127.0.0.1', (err?: Error) => {
      if (err !== undefined) { fail(err); return; }
      const address = server.address();
      ok({ port: typeof address === 'object' && address !== null ? address.port : 0,
        close: () => new Promise((done) => { server.close(() => done()); }) });
    });
  });
}

async function fastify(variant: Variant, before: boolean, redis: IORedis, limit: number, windowS: number): Promise<Listening> {
  const make = (await import('fastify')).default;
  const app = make({ logger: false });
  if (variant !== 'fastify-none') {
    const rateLimit = (await import('@fastify/rate-limit')).default;
    const keyGenerator = (req: { headers: Record<string, string | string[] | undefined> }): string => header(req.headers['x-id']);
    if (variant === 'fastify-slidingwindow' || variant === 'fastify-slidingwindow-nocache') {
      const { fastifyStore } = await client(before);
      const store = fastifyStore({ client: redis, denyCache: variant === 'fastify-slidingwindow' });
      await app.register(rateLimit, { max: limit, timeWindow: windowS * 1000, keyGenerator, store });
    } else {
      await app.register(rateLimit, { max: limit, timeWindow: windowS * 1000, keyGenerator, redis });
    }
  }
  app.get('/', async () => 'ok');
  await app.listen({ port: 0, host: '127.0.0.1' });
  const address = app.server.address();
  return { port: typeof address === 'object' && address !== null ? address.port : 0, close: () => app.close() };
}

async function main(argv: string[]): Promise<void> {
  const [named, addr, limitText, windowText] = argv;
  const before = named?.endsWith('-before') === true;
  const variant = before ? named!.slice(0, -'-before'.length) : named;
  const limit = Number(limitText);
  const windowS = Number(windowText);
  const at = addr?.lastIndexOf(':') ?? -1;
  if (!VARIANTS.includes(variant as Variant) || addr === undefined || at < 0
    || (before && !variant!.includes('-slidingwindow'))
    || !Number.isSafeInteger(limit) || limit < 1 || !Number.isSafeInteger(windowS) || windowS < 1) {
    console.error(`app.js <${VARIANTS.join('|')}>[-before] <redis host:port> <limit> <window s>`);
    process.exit(2);
  }
  const redis = new IORedis({ host: addr.slice(0, at), port: Number(addr.slice(at + 1)) });
  await redis.ping();
  const v = variant as Variant;
  const app = v.startsWith('express-') ? await express(v, before, redis, limit, windowS) : await fastify(v, before, redis, limit, windowS);
  console.log(`PORT ${app.port}`);
  const stop = (): void => { void app.close().finally(() => { redis.disconnect(); process.exit(0); }); };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}

if (require.main === module) {
  main(process.argv.slice(2)).catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
