/**
 * The outage table of the README, measured: `npm run bench:outage` (after `npm run build`).
 *
 * For ioredis and node-redis, each the user's own client at its library's defaults, and the
 * limiter at its defaults (timeoutMs 500, probeIntervalMs 1000, fail-open), on a real
 * server with the module: the server stopped (connections refused) or frozen (SIGSTOP);
 * the time of the first failed call, then 1,000 sequential calls (all answered without
 * Redis) and their total time; the outage goes on (3, 3.35 or 3.7 s, one run each: the server comes back at a different point of the probe interval and of the client's backoff) with a call
 * every 5 ms; then the server back (started again on its port, or SIGCONT) and the time until a call is limited by Redis again (a CHECK that is not degraded),
 * and until the client itself is connected again (its own reconnect backoff). The servers:
 * SW_NODE_KINDS (default redis7,valkey9). Writes bench/results/node-outage.md and prints it.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { SlidingWindowRateLimiter } from '../src';
import { connect, type Lib } from '../test/helpers/clients';
import { REPO, startServer, type KindName } from '../test/helpers/servers';

const KINDS = (process.env.SW_NODE_KINDS ?? 'redis7,valkey9').split(',') as KindName[];
/** One run per outage length: the client's backoff is at a different point of its schedule when the server comes back. */
const OUTAGES_MS = [3000, 3350, 3700];
const CALLS = 1000;
const quiet = { warn: () => undefined, error: () => undefined };

interface Row {
  kind: KindName; lib: Lib; state: 'stopped' | 'frozen'; firstMs: number; allMs: number; allOpen: boolean;
  backMs: number; clientMs: number; probes: number;
}

function clientReady(client: object): boolean {
  const c = client as { status?: string; isReady?: boolean };
  return c.status === 'ready' || c.isReady === true;
}

async function measure(kind: KindName, lib: Lib, state: Row['state'], outageMs: number): Promise<Row> {
  const server = await startServer(kind);
  const handle = await connect(lib, server.port);
  const limiter = new SlidingWindowRateLimiter(handle.client, { prefix: `outage:${lib}:${state}:`, logger: quiet });
  try {
    for (let i = 0; i < 10; i++) await limiter.check('k', 1000000, 60);
    if (state === 'stopped') await server.stop(); else server.pause();
    const down = performance.now();
    await sleep(50);
    const t = performance.now();
    const first = await limiter.check('k', 1000000, 60);
    const firstMs = performance.now() - t;
    if (!first.degraded) throw new Error(`${lib} ${state}: the first call was answered by Redis`);
    const t1 = performance.now();
    let allOpen = true;
    for (let i = 0; i < CALLS; i++) {
      const r = await limiter.check('k', 1000000, 60);
      allOpen &&= r.allowed && r.degraded;
    }
    const allMs = performance.now() - t1;
    // An outage of 3 to 3.7 s, with calls going on (one every 5 ms, as in a service under load): the
    // probes keep failing, one a second, and the client's own reconnect backoff grows. The
    // calls go on while the server comes back, so the server answers again at any point of
    // the probe interval.
    let backAt = Number.NaN;
    let limitedAt = Number.NaN;
    let clientAt = Number.NaN;
    const caller = (async () => {
      const end = performance.now() + 15000 + outageMs;
      while ((Number.isNaN(limitedAt) || Number.isNaN(clientAt)) && performance.now() < end) {
        const r = await limiter.check('k', 1000000, 60);
        if (!r.degraded && Number.isNaN(limitedAt)) limitedAt = performance.now();
        if (!Number.isNaN(backAt) && Number.isNaN(clientAt) && clientReady(handle.client)) clientAt = performance.now();
        await sleep(5);
      }
    })();
    await sleep(outageMs - (performance.now() - down));
    if (state === 'stopped') await server.start(); else server.resume();
    backAt = performance.now();
    await caller;
    // start() returns on the first PONG of its polling (every 20 ms): an answer may come first.
    const backMs = Math.max(0, limitedAt - backAt);
    const clientMs = Math.max(0, clientAt - backAt);
    return { kind, lib, state, firstMs, allMs, allOpen, backMs, clientMs, probes: limiter.circuit.probes };
  } finally {
    await handle.close();
    await server.cleanup();
  }
}

async function main(): Promise<void> {
  const rows: Row[][] = [];
  for (const kind of KINDS) {
    for (const lib of ['ioredis', 'node-redis'] as Lib[]) {
      for (const state of ['stopped', 'frozen'] as const) {
        const runs: Row[] = [];
        for (const outageMs of OUTAGES_MS) {
          const row = await measure(kind, lib, state, outageMs);
          console.error(JSON.stringify({ outageMs, ...row }));
          runs.push(row);
        }
        rows.push(runs);
      }
    }
  }
  const med = (runs: Row[], f: (r: Row) => number): number => runs.map(f).sort((a, b) => a - b)[Math.floor(runs.length / 2)]!;
  const max = (runs: Row[], f: (r: Row) => number): number => Math.max(...runs.map(f));
  const s = (ms: number): string => `${(ms / 1000).toFixed(2)} s`;
  const names: Partial<Record<KindName, string>> = { redis7: 'Redis 7.0', redis8: 'Redis 8.2', valkey8: 'Valkey 8.1', valkey9: 'Valkey 9.1' };
  const version = (name: string): string => (require(`${name}/package.json`) as { version: string }).version;
  let commit = 'unknown';
  try { commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim(); } catch { /* not a checkout */ }
  const lines = [
    `Measured by \`npm run bench:outage\` at ${commit} on ${KINDS.map((k) => names[k]).join(' and ')}, outages of ${OUTAGES_MS.map((o) => o / 1000).join(', ')} s (one run each; median, and the slowest in brackets) with a call every 5 ms, ioredis ${version('ioredis')} and redis (node-redis) ${version('redis')} at their defaults, the limiter at its defaults (timeoutMs 500, probeIntervalMs 1000, fail-open):`,
    '',
    `| server | client | outage | first failed call | the next ${CALLS.toLocaleString('en')} calls (all) | all allowed, degraded | limiting back after the server was | the client itself reconnected after | probes (each run) |`,
    '|---|---|---|---|---|---|---|---|---|',
    ...rows.map((runs) => {
      const r = runs[0]!;
      return `| ${names[r.kind]} | ${r.lib} | ${r.state === 'stopped' ? 'stopped (refused)' : 'frozen (SIGSTOP)'} `
        + `| ${med(runs, (x) => x.firstMs).toFixed(0)} ms (${max(runs, (x) => x.firstMs).toFixed(0)}) `
        + `| ${med(runs, (x) => x.allMs).toFixed(1)} ms (${max(runs, (x) => x.allMs).toFixed(1)}) `
        + `| ${runs.every((x) => x.allOpen) ? 'yes' : 'NO'} `
        + `| ${s(med(runs, (x) => x.backMs))} (${s(max(runs, (x) => x.backMs))}) `
        + `| ${s(med(runs, (x) => x.clientMs))} (${s(max(runs, (x) => x.clientMs))}) `
        + `| ${runs.map((x) => x.probes).join(', ')} |`;
    }),
    '',
  ];
  const text = lines.join('\n');
  const dir = join(REPO, 'bench', 'results');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'node-outage.md'), text);
  console.log(text);
}

main().then(() => process.exit(0), (err: unknown) => { console.error(err); process.exit(1); });
