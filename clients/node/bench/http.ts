/**
 * `npm run bench` (from `make bench-node`): requests per second through an Express 5 app
 * with express-rate-limit 8, loaded by autocannon, with our store (one SLIDINGWINDOW.CHECK
 * per request) against rate-limit-redis (one EVALSHA of its INCR/PEXPIRE script) on the same
 * Redis (the module loaded), both through the same ioredis client at its defaults; and the
 * Redis server time per request of each, from INFO commandstats (reset before each run):
 * every command's usec over the HTTP responses. A row without a limiter is the ceiling.
 * Every request is allowed (limit 10^9 per 60 s, one key: the client's IP). The app runs in
 * a child process, autocannon in this one; every other round runs the stores in reverse order.
 * BENCH_STORES=slidingwindow,rate-limit-redis narrows a run. Writes bench/results/node.md and node.json.
 *
 * BENCH_DURATION (s per run, default 8), BENCH_CONNECTIONS (default 32), BENCH_ROUNDS (default 2).
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import autocannon from 'autocannon';
import IORedis from 'ioredis';
import { REPO, startServer, type KindName } from '../test/helpers/servers';

type StoreName = 'none' | 'slidingwindow' | 'rate-limit-redis';
const STORES = (process.env.BENCH_STORES?.split(',') ?? ['none', 'slidingwindow', 'rate-limit-redis']) as StoreName[];
const DURATION = Number(process.env.BENCH_DURATION ?? 8);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 32);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2);
const KIND = (process.env.SW_NODE_KINDS?.split(',')[0] ?? 'redis7') as KindName;
const LIMIT = 1_000_000_000;

/** The child: an Express app with the store, printing its port. */
async function serve(store: StoreName, redisPort: number): Promise<void> {
  const express = (await import('express')).default;
  const { rateLimit } = await import('express-rate-limit');
  const redis = new IORedis({ port: redisPort, host: '127.0.0.1' });
  const app = express();
  if (store === 'slidingwindow') {
    const { SlidingWindowStore } = await import('../src');
    app.use(rateLimit({ windowMs: 60000, limit: LIMIT, standardHeaders: 'draft-8', legacyHeaders: false,
      store: new SlidingWindowStore({ client: redis }) }));
  } else if (store === 'rate-limit-redis') {
    const { RedisStore } = await import('rate-limit-redis');
    app.use(rateLimit({ windowMs: 60000, limit: LIMIT, standardHeaders: 'draft-8', legacyHeaders: false,
      store: new RedisStore({ sendCommand: (command: string, ...args: string[]) => redis.call(command, ...args) as never }) }));
  }
  app.get('/', (_req, res) => { res.send('ok'); });
  const server = app.listen(0, '127.0.0.1', () => {
    const address = server.address();
    console.log(`PORT ${typeof address === 'object' && address !== null ? address.port : ''}`);
  });
}

function startApp(store: StoreName, redisPort: number): Promise<{ child: ChildProcess; url: string }> {
  const child = spawn(process.execPath, [__filename, 'serve', store, String(redisPort)], { stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((ok, fail) => {
    let out = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /PORT (\d+)/.exec(out);
      if (m !== null) ok({ child, url: `http://127.0.0.1:${m[1]}/` });
    });
    child.once('exit', (code) => fail(new Error(`app exited ${code}`)));
  });
}

interface CommandStat { calls: number; usec: number }

async function commandStats(redis: IORedis): Promise<Record<string, CommandStat>> {
  const text = await redis.info('commandstats');
  const out: Record<string, CommandStat> = {};
  for (const line of text.split('\r\n')) {
    const m = /^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/.exec(line);
    if (m !== null && m[1] !== 'info' && m[1] !== 'config|resetstat' && m[1] !== 'config') {
      out[m[1]!] = { calls: Number(m[2]), usec: Number(m[3]) };
    }
  }
  return out;
}

interface Run {
  store: StoreName; round: number; reqPerSec: number; responses: number; non2xx: number; errors: number;
  p50ms: number; p99ms: number; serverUsecPerRequest: number; commands: Record<string, CommandStat>;
}

const cannon = (url: string, duration: number): Promise<autocannon.Result> =>
  autocannon({ url, connections: CONNECTIONS, duration });

async function main(): Promise<void> {
  const server = await startServer(KIND);
  const redis = new IORedis({ port: server.port, host: '127.0.0.1' });
  const runs: Run[] = [];
  try {
    for (let round = 1; round <= ROUNDS; round++) {
      // every other round in reverse order: the machine's load drifts, and whoever runs first/last is not favoured
      for (const store of round % 2 === 1 ? STORES : [...STORES].reverse()) {
        const { child, url } = await startApp(store, server.port);
        try {
          await cannon(url, 2); // warm-up (JIT, connections, script load)
          await redis.config('RESETSTAT');
          const r = await cannon(url, DURATION);
          const commands = await commandStats(redis);
          const responses = r['2xx'] + r.non2xx;
          const usec = Object.values(commands).reduce((a, c) => a + c.usec, 0);
          const run: Run = { store, round, reqPerSec: r.requests.average, responses, non2xx: r.non2xx, errors: r.errors,
            p50ms: r.latency.p50, p99ms: r.latency.p99, serverUsecPerRequest: responses > 0 ? usec / responses : 0, commands };
          console.error(JSON.stringify(run));
          runs.push(run);
        } finally {
          child.kill();
        }
      }
    }
  } finally {
    redis.disconnect();
    await server.cleanup();
  }
  let commit = 'unknown';
  try { commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: REPO, encoding: 'utf8' }).trim(); } catch { /* no checkout */ }
  const version = (name: string): string =>
    (JSON.parse(readFileSync(join(__dirname, '..', '..', 'node_modules', name, 'package.json'), 'utf8')) as { version: string }).version;
  const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length;
  const summary = STORES.map((store) => {
    const mine = runs.filter((r) => r.store === store);
    const main = store === 'slidingwindow' ? 'slidingwindow.check' : store === 'rate-limit-redis' ? 'evalsha' : '';
    const calls = mine.reduce((a, r) => a + (r.commands[main]?.calls ?? 0), 0);
    const usec = mine.reduce((a, r) => a + (r.commands[main]?.usec ?? 0), 0);
    return { store, reqPerSec: mean(mine.map((r) => r.reqPerSec)), p50ms: mean(mine.map((r) => r.p50ms)),
      p99ms: mean(mine.map((r) => r.p99ms)), serverUsecPerRequest: mean(mine.map((r) => r.serverUsecPerRequest)),
      command: main, usecPerCall: calls > 0 ? usec / calls : 0, non2xx: mine.reduce((a, r) => a + r.non2xx + r.errors, 0) };
  });
  const ours = summary.find((s) => s.store === 'slidingwindow') ?? { serverUsecPerRequest: Number.NaN };
  const theirs = summary.find((s) => s.store === 'rate-limit-redis') ?? { serverUsecPerRequest: Number.NaN };
  const target = ours.serverUsecPerRequest <= theirs.serverUsecPerRequest;
  const env = `${KIND}, Node ${process.version}, express ${version('express')}, express-rate-limit ${version('express-rate-limit')}, `
    + `rate-limit-redis ${version('rate-limit-redis')}, ioredis ${version('ioredis')}, autocannon ${version('autocannon')}; `
    + `${cpus().length} cores, load average ${loadavg()[0]!.toFixed(1)} at the end`;
  const md = [
    '# Node: express-rate-limit stores over HTTP',
    '',
    `Commit ${commit}. \`npm run bench\` in clients/node (\`make bench-node\`): autocannon, ${CONNECTIONS} connections, `
    + `${DURATION} s per run after 2 s of warm-up, ${ROUNDS} rounds (every other one in reverse order; means below), the app in its own process; every request allowed `
    + `(one key, limit 10^9 per 60 s). Server time: INFO commandstats usec of every command over the HTTP responses. ${env}.`,
    '',
    '| store | req/s | p50 ms | p99 ms | Redis server µs per request | its command | µs per call |',
    '|---|---|---|---|---|---|---|',
    ...summary.map((s) => `| ${s.store === 'none' ? 'no limiter' : s.store} | ${s.reqPerSec.toFixed(0)} | ${s.p50ms.toFixed(1)} | ${s.p99ms.toFixed(1)} | `
      + `${s.store === 'none' ? '-' : s.serverUsecPerRequest.toFixed(2)} | ${s.command === '' ? '-' : s.command.toUpperCase()} | ${s.command === '' ? '-' : s.usecPerCall.toFixed(2)} |`),
    '',
    `Target (server time per request no more than rate-limit-redis's): ${target ? 'met' : 'NOT met'} `
    + `(${ours.serverUsecPerRequest.toFixed(2)} µs against ${theirs.serverUsecPerRequest.toFixed(2)} µs). `
    + `Non-2xx responses and errors: ${summary.map((s) => `${s.store} ${s.non2xx}`).join(', ')}.`,
    '',
  ].join('\n');
  const dir = join(REPO, 'bench', 'results');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'node.md'), md);
  // One line per row, so that a diff shows what moved (bench/results stays small).
  const rows = (xs: unknown[]): string => xs.map((x) => JSON.stringify(x)).join(',\n  ');
  const head = JSON.stringify({ commit, env, connections: CONNECTIONS, duration: DURATION, rounds: ROUNDS }).slice(0, -1);
  writeFileSync(join(dir, 'node.json'), `${head},\n "summary": [\n  ${rows(summary)}\n ],\n "runs": [\n  ${rows(runs)}\n ]\n}\n`);
  console.log(md);
  if (!target) process.exitCode = 1;
}

if (process.argv[2] === 'serve') {
  serve(process.argv[3] as StoreName, Number(process.argv[4])).catch((err: unknown) => { console.error(err); process.exit(1); });
} else {
  main().catch((err: unknown) => { console.error(err); process.exit(1); });
}
