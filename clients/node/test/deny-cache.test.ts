/**
 * The deny cache (src/deny-cache.ts): refusals answered without Redis, exactly.
 *
 * Exactness is checked against the server itself, as the Python client's
 * tests/test_deny_cache.py does: the limiter's CHECKs are sent as MULTI / TIME / CHECK /
 * TIME / EXEC, so the server instant of each decision is known, and every cached refusal
 * is followed at once by a PEEK with the same arguments sent straight to Redis (with TIME,
 * atomically), which must refuse too unless the instant Redis could allow has passed (with
 * no writer in between, a refusal later means a refusal at the cached instant). The
 * instants include the last milliseconds before each entry ends. Commands are counted by
 * the client adapter the limiter sends through, and by INFO commandstats.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import express from 'express';
import { rateLimit } from 'express-rate-limit';
import IORedis from 'ioredis';
import {
  DenyCache, MultiLimitResult, SlidingWindowRateLimiter, SlidingWindowStore, SlidingWindowThrottlerStorage,
  adapterFor, fastifyStore, type Adapter,
} from '../src';
import { LIBS, connect, type Handle, type Lib } from './helpers/clients';
import { listening, statuses } from './helpers/http';
import {
  ALL_KINDS, kinds, rawCommand, startLibraryServer, startServer, type KindName, type Server,
} from './helpers/servers';
import { prng as rng } from './helpers/prng';

type Backend = 'module' | 'library';
type Pair = [number, number];
const SECONDS_LIMITS: Pair[] = [[10, 1], [100, 60]];
/** Short ms windows: many entries (of 10 to 200 ms) in a short run. */
const MS_LIMITS: Pair[] = [[10, 100], [100, 6000]];
/** The limiters' timeout here: a loaded machine must not open the circuit (outage.test.ts tests that). */
const TIMEOUT_MS = 5000;

let seq = 0;
const fresh = (letter: string): string => `dc${letter}${seq++}:`;

function nameOf(args: readonly string[]): string {
  const [first, second] = args;
  if (first === 'FCALL' || first === 'FCALL_RO') return (second ?? '').replace(/^slidingwindow_/, '').toUpperCase();
  return (first ?? '').replace(/^SLIDINGWINDOW\./, '');
}

interface MultiLike { exec(): Promise<unknown> }

/** MULTI ... EXEC of `commands` through the user's client; the replies (an error reply throws). */
async function transaction(client: object, lib: Lib, commands: string[][]): Promise<unknown[]> {
  if (lib === 'ioredis') {
    let m = (client as IORedis).multi();
    for (const c of commands) m = m.call(c[0]!, ...c.slice(1));
    const out = (await m.exec()) ?? [];
    return out.map(([err, reply]) => {
      if (err) throw err;
      return reply;
    });
  }
  let m = (client as { multi(): MultiLike & { addCommand(args: string[]): unknown } }).multi();
  for (const c of commands) m = m.addCommand(c) as typeof m;
  return (await m.exec()) as unknown[];
}

/**
 * The adapter the limiter sends through: the user's client, each command counted (by name,
 * and by name and key). `timed`: every CHECK goes as MULTI / TIME / CHECK / TIME / EXEC and
 * `decided[key]` keeps the server ms before and after it, and its reply.
 */
class Counting implements Adapter {
  readonly kind: string;
  readonly calls = new Map<string, number>();
  readonly decided = new Map<string, { t1: number; t2: number; reply: unknown[] }>();
  /** The most CHECKs of one key in flight at once. */
  readonly maxInFlight = new Map<string, number>();
  private readonly inFlight = new Map<string, number>();
  private readonly inner: Adapter;

  constructor(readonly client: object, readonly lib: Lib, readonly timed = false) {
    this.inner = adapterFor(client);
    this.kind = `counting ${this.inner.kind}`;
  }

  count(name: string, key?: string): number {
    return this.calls.get(key === undefined ? name : `${name} ${key}`) ?? 0;
  }

  async send(key: string, args: readonly string[], readonly: boolean): Promise<unknown> {
    const name = nameOf(args);
    for (const k of [name, `${name} ${key}`]) this.calls.set(k, (this.calls.get(k) ?? 0) + 1);
    if (name !== 'CHECK') return this.inner.send(key, args, readonly);
    const now = (this.inFlight.get(key) ?? 0) + 1;
    this.inFlight.set(key, now);
    this.maxInFlight.set(key, Math.max(now, this.maxInFlight.get(key) ?? 0));
    try {
      if (!this.timed) return await this.inner.send(key, args, readonly);
      const [t1, reply, t2] = await transaction(this.client, this.lib, [['TIME'], [...args], ['TIME']]);
      this.decided.set(key, { t1: timeMs(t1), t2: timeMs(t2), reply: reply as unknown[] });
      return reply;
    } finally {
      this.inFlight.set(key, (this.inFlight.get(key) ?? 1) - 1);
    }
  }

  primaries(): ReturnType<Adapter['primaries']> {
    return this.inner.primaries();
  }
}

function timeMs(reply: unknown): number {
  const [sec, usec] = reply as [string, string];
  return Number(sec) * 1000 + Number(usec) / 1000;
}

/**
 * The earliest server instant (ms) at which the refused request can be allowed: the server
 * decided at or after the first TIME, at its clock floored to ms (or seconds), and allows
 * from that instant plus retry_after. A cached refusal must come before it, and a PEEK
 * that allows after it.
 */
function allowedFrom(decided: { t1: number; t2: number; reply: unknown[] }, ms: boolean): number {
  const retry = Number(decided.reply[4]);
  const t = Math.floor(decided.t1);
  return ms ? t + retry : (Math.floor(t / 1000) + retry) * 1000;
}

function limitArgs(limits: Pair[], ms: boolean): string[] {
  const [[limit, window], ...more] = limits as [Pair, ...Pair[]];
  const args = [String(limit), String(window)];
  for (const [l, w] of more) args.push('LIMIT', String(l), String(w));
  return ms ? [...args, 'MS'] : args;
}

function peekArgs(backend: Backend, key: string, limits: Pair[], ms: boolean): string[] {
  const rest = [...limitArgs(limits, ms), 'DETAILS'];
  return backend === 'module' ? ['SLIDINGWINDOW.PEEK', key, ...rest] : ['FCALL_RO', 'slidingwindow_peek', '1', key, ...rest];
}

interface EntryView { deadline: number; never: boolean; cost: number }

/** The cache's first entry under `key` (its internals: the deadline, in performance.now() ms). */
function entryOf(cache: DenyCache, key: string): EntryView | undefined {
  const held = (cache as unknown as { keys: Map<string, Map<string, EntryView>> }).keys.get(key);
  return held?.values().next().value;
}

function heldKeys(cache: DenyCache): string[] {
  return [...(cache as unknown as { keys: Map<string, unknown> }).keys.keys()];
}

/** Resolves at `deadline` (performance.now() ms): sleeps, then yields to the event loop until then. */
async function spinUntil(deadline: number): Promise<void> {
  for (;;) {
    const left = deadline - performance.now();
    if (left <= 0) return;
    if (left > 25) await sleep(left - 20);
    else await new Promise((ok) => setImmediate(ok));
  }
}

/** SLIDINGWINDOW.CHECK (module) or FCALL (library) calls the server has counted. */
async function checkCalls(port: number, backend: Backend): Promise<number> {
  const info = await rawCommand(port, 'INFO commandstats', 3000);
  const name = backend === 'module' ? 'slidingwindow\\.check' : 'fcall';
  const m = new RegExp(`cmdstat_${name}:calls=(\\d+)`).exec(info);
  return m === null ? 0 : Number(m[1]);
}

// --- exactness --------------------------------------------------------------------------

interface ExactnessRun { unit: 'seconds' | 'ms'; several: boolean; backend: Backend; lib: Lib }

interface Figures {
  hits: number; confirmed: number; peeksRefused: number; lastMs: number; entries: number;
  coverage: number; afterEnd: number; afterEndAllowed: number; times: number;
}

/**
 * One run: a flood on other refused identities through the same limiter for load, and on
 * "me": each entry probed at some instant (often its last milliseconds), every cached
 * refusal judged against the server, and the first call after each entry's end sent to Redis.
 */
async function exactness(client: object, judge: IORedis, run: ExactnessRun, durationMs: number): Promise<Figures> {
  const ms = run.unit === 'ms';
  const limits = (ms ? MS_LIMITS : SECONDS_LIMITS).slice(0, run.several ? 2 : 1);
  const counting = new Counting(client, run.lib, true);
  const limiter = new SlidingWindowRateLimiter(counting, {
    prefix: fresh('x'), denyCache: true, backend: run.backend, timeoutMs: TIMEOUT_MS,
  });
  const cache = limiter.denyCache!;
  let stop = false;
  // Each call yields to the event loop: answers from the cache resolve in microtasks alone,
  // and a loop of them would starve the timers (requests that come from sockets never do).
  const others = [0, 1].map(async (i) => {
    while (!stop) {
      for (let j = 0; j < 3; j++) {
        await limiter.checkLimits(`o${i}-${j}`, limits, { ms });
        await new Promise((ok) => setImmediate(ok));
      }
    }
  });
  const random = rng(7);
  const key = limiter.key('me');
  const deltasMs = [0.3, 0.6, 1, 2, 3, 5, 10, 30];
  const f: Figures = { hits: 0, confirmed: 0, peeksRefused: 0, lastMs: 0, entries: 0, coverage: 0, afterEnd: 0, afterEndAllowed: 0, times: 0 };
  const coverage: number[] = [];
  const end = performance.now() + durationMs;

  /**
   * One check through the cache (at `target`, when given), judged against the server; null
   * when it went to Redis. `before`, a server instant no later than the cache's lookup (made
   * when checkLimits is called): the lookup's client instant plus the offset's lower bound,
   * from a TIME sent just before (so no round trip lies between the target and the lookup).
   */
  const cachedCheck = async (target?: number): Promise<MultiLimitResult | null> => {
    const sent = counting.count('CHECK', key);
    const decided = counting.decided.get(key)!;
    const allowedAt = allowedFrom(decided, ms);
    const entry = entryOf(cache, key);
    const server = timeMs(await judge.call('TIME'));
    const lo = server - performance.now(); // server = client + off, off >= lo
    if (target !== undefined) await spinUntil(target);
    const before = performance.now() + lo;
    const got = await limiter.checkLimits('me', limits, { ms });
    if (counting.count('CHECK', key) !== sent) return null;
    if (entry !== undefined && entry.deadline - performance.now() < 5) f.lastMs += 1;
    const [after, peek] = await transaction(judge, 'ioredis', [['TIME'], peekArgs(run.backend, key, limits, ms)]);
    const p = (peek as unknown[]).slice(0, 6).map(Number);
    f.hits += 1;
    assert.equal(got.allowed, false);
    assert.ok(before < allowedAt, `cached refusal after Redis could allow: server ms ${before} >= ${allowedAt}`);
    if (timeMs(after) < allowedAt) f.confirmed += 1;
    if (p[0] === 0) {
      f.peeksRefused += 1;
      assert.ok(got.retryAfter >= p[4]! && p[4]! >= 1, `retryAfter ${got.retryAfter}, PEEK's ${p[4]}`);
      assert.deepEqual([got.summary.limit, got.summary.remaining], [p[2], p[3]]);
    } else {
      assert.ok(timeMs(after) >= allowedAt, `Redis allows before retry_after: ${JSON.stringify(peek)} at ${timeMs(after)} < ${allowedAt}`);
    }
    return got;
  };

  try {
    while (performance.now() < end) {
      if (counting.decided.has(key) && await cachedCheck() !== null) continue;
      const sent = counting.count('CHECK', key);
      const got = await limiter.checkLimits('me', limits, { ms });
      if (counting.count('CHECK', key) === sent) continue; // from the cache: judged on the next round
      if (got.allowed) continue;
      const entry = entryOf(cache, key);
      assert.ok(entry !== undefined && !entry.never, 'a refusal is cached');
      const left = entry.deadline - performance.now();
      if (left <= 0) continue; // too short to use (e.g. retry_after 1 ms)
      f.entries += 1;
      coverage.push(left / (got.retryAfter * (ms ? 1 : 1000)));
      // Some instant of the entry: often its last milliseconds (always in seconds, where a
      // run has one or two entries: an entry lasts until the second after next).
      const late = deltasMs.slice(0, ms ? deltasMs.length : 6);
      const target = !ms || random() < 0.75 ? entry.deadline - late[Math.floor(random() * late.length)]!
        : performance.now() + random() * (entry.deadline - performance.now());
      await cachedCheck(target);
      // After the entry: the first request goes to Redis (counted from before the end), and
      // its answer is the server's. (The probe may have gone to Redis, past the end: then the
      // entry is the refusal it brought back, if any.)
      const current = entryOf(cache, key);
      if (current === undefined) continue;
      const before = counting.count('CHECK', key);
      await spinUntil(current.deadline);
      const next = await limiter.checkLimits('me', limits, { ms });
      assert.ok(counting.count('CHECK', key) >= before + 1, 'the first call after the entry ended went to Redis');
      assert.equal(next.allowed, Number(counting.decided.get(key)!.reply[0]) === 1);
      f.afterEnd += 1;
      if (next.allowed) f.afterEndAllowed += 1;
    }
  } finally {
    stop = true;
    await Promise.all(others);
  }
  f.coverage = coverage.length === 0 ? 0 : coverage.reduce((a, b) => a + b, 0) / coverage.length;
  f.times = counting.count('TIME');
  return f;
}

/** The run's figures, tried up to 3 times when a loaded machine left too few entries to probe (0 judged). */
async function exactnessTried(client: object, judge: IORedis, run: ExactnessRun, durationMs: number): Promise<Figures> {
  let f: Figures | undefined;
  for (let attempt = 0; attempt < 3; attempt++) {
    f = await exactness(client, judge, run, durationMs);
    if (f.hits >= 1 && f.afterEnd >= 1) return f;
  }
  return f!;
}

function describeFigures(f: Figures): string {
  return `${f.hits} cached refusals judged (${f.confirmed} confirmed before the allowed instant by TIME, `
    + `${f.peeksRefused} also refused by PEEK), ${f.lastMs} in an entry's last 5 ms; ${f.entries} entries covering `
    + `${Math.round(f.coverage * 100)}% of retry_after on average; ${f.afterEnd} first calls after an end went to Redis `
    + `(${f.afterEndAllowed} allowed); ${f.times} TIME calls`;
}

/** Two runs per server kind, so that the four kinds cover seconds and ms x one and several limits x both backends. */
function runsFor(index: number): ExactnessRun[] {
  const even = index % 2 === 0;
  const first: Backend = index < 2 ? 'module' : 'library';
  const second: Backend = index < 2 ? 'library' : 'module';
  return [
    { unit: 'seconds', several: even, backend: first, lib: even ? 'ioredis' : 'node-redis' },
    { unit: 'ms', several: !even, backend: second, lib: even ? 'node-redis' : 'ioredis' },
  ];
}

// --- the flood --------------------------------------------------------------------------

const REQUESTS = 1000;
const TASKS = 20;
const SPAN_MS = 2000;

/** The server clock's offset to performance.now(), ms (the narrowest of 5 TIME calls). */
async function serverOffset(judge: IORedis): Promise<number> {
  let best: [number, number] | undefined;
  for (let i = 0; i < 5; i++) {
    const c1 = performance.now();
    const t = timeMs(await judge.call('TIME'));
    const c2 = performance.now();
    if (best === undefined || c2 - c1 < best[0]) best = [c2 - c1, t - (c1 + c2) / 2];
  }
  return best![1];
}

type Answer = [allowed: boolean, sent: number, done: number];

async function flood(limiter: SlidingWindowRateLimiter, start: number): Promise<Answer[]> {
  const out: Answer[] = new Array<Answer>(REQUESTS);
  await Promise.all(Array.from({ length: TASKS }, async (_, t) => {
    for (let i = 0; i < REQUESTS / TASKS; i++) {
      const slot = t + i * TASKS;
      const pause = start + (SPAN_MS * slot) / REQUESTS - performance.now();
      if (pause > 0) await sleep(pause);
      const sent = performance.now();
      const allowed = (await limiter.checkLimits('flood', SECONDS_LIMITS)).allowed;
      out[slot] = [allowed, sent, performance.now()];
    }
  }));
  return out;
}

// --- the tests --------------------------------------------------------------------------

const selected = kinds(ALL_KINDS);

for (const [index, { name, skip }] of selected.entries()) {
  describe(`deny cache [${name}]`, { skip }, () => {
    const servers: Partial<Record<Backend, Server>> = {};
    const handles: Partial<Record<`${Backend} ${Lib}`, Handle>> = {};
    const judges: Partial<Record<Backend, IORedis>> = {};
    const client = (backend: Backend, lib: Lib): object => handles[`${backend} ${lib}`]!.client;
    before(async () => {
      const [m, l] = await Promise.allSettled([startServer(name), startLibraryServer(name)]);
      if (m.status === 'fulfilled') servers.module = m.value;
      if (l.status === 'fulfilled') servers.library = l.value;
      for (const r of [m, l]) if (r.status === 'rejected') throw r.reason; // `after` stops the one that started
      for (const backend of ['module', 'library'] as const) {
        judges[backend] = new IORedis({ port: servers[backend]!.port, host: '127.0.0.1' });
        for (const lib of LIBS) handles[`${backend} ${lib}`] = await connect(lib, servers[backend]!.port);
      }
    });
    after(async () => {
      for (const h of Object.values(handles)) await h.close();
      for (const j of Object.values(judges)) j.disconnect();
      await Promise.all(Object.values(servers).map((s) => s.cleanup()));
    });

    for (const run of runsFor(index)) {
      const title = `exact: every cached refusal refused by Redis too, to the entry's last ms; then the next call goes to Redis `
        + `(${run.unit}, ${run.several ? 'several limits' : 'one limit'}, ${run.backend}, ${run.lib})`;
      test(title, async (t) => {
        const f = await exactnessTried(client(run.backend, run.lib), judges[run.backend]!, run, run.unit === 'ms' ? 1200 : 3000);
        t.diagnostic(describeFigures(f));
        assert.ok(f.hits >= 1 && f.afterEnd >= 1, describeFigures(f));
        if (run.unit === 'seconds') {
          // The offset was measured (3 TIME calls), so an entry covers most of its second.
          assert.ok(f.times >= 3, `TIME calls: ${f.times}`);
          assert.ok(f.coverage > 0.5, `entries cover ${f.coverage} of retry_after`);
        } else {
          assert.equal(f.times, 0, 'no TIME in ms');
        }
      });
    }

    for (const backend of ['module', 'library'] as const) {
      for (const lib of LIBS) {
        describe(`${backend} via ${lib}`, () => {
          const counted = (denyCache: boolean | DenyCache = true): [Counting, SlidingWindowRateLimiter] => {
            const counting = new Counting(client(backend, lib), lib);
            return [counting, new SlidingWindowRateLimiter(counting, { prefix: fresh('u'), denyCache, backend, timeoutMs: TIMEOUT_MS })];
          };

          test('explicit now: exact in units, answered locally until retryAfter, then Redis', async () => {
            const [counting, limiter] = counted();
            for (let i = 0; i < 3; i++) assert.ok((await limiter.check('a', 3, 10, { now: 1000 })).allowed);
            const refused = await limiter.check('a', 3, 10, { now: 1001 });
            assert.ok(!refused.allowed && refused.retryAfter > 0);
            const calls = counting.count('CHECK');
            for (let now = 1001; now < 1001 + refused.retryAfter; now++) {
              const got = await limiter.check('a', 3, 10, { now });
              const peek = await limiter.peek('a', 3, 10, { now });
              // Redis refuses too, and the cached retryAfter is counted down exactly (the
              // count may differ: the estimate falls as the previous window weighs less).
              assert.deepEqual([got.allowed, peek.allowed], [false, false], `now ${now}`);
              assert.equal(got.retryAfter, refused.retryAfter - (now - 1001));
              assert.equal(got.retryAfter, peek.retryAfter, `now ${now}`);
            }
            assert.equal(counting.count('CHECK'), calls, 'all answered locally');
            assert.equal(counting.count('PEEK'), refused.retryAfter, 'PEEK always asks Redis');
            assert.ok((await limiter.check('a', 3, 10, { now: 1001 + refused.retryAfter })).allowed, 'allowed at retryAfter');
            assert.equal(counting.count('CHECK'), calls + 1, 'that one went to Redis');
          });

          test('the same limits and cost are cached; another cost, other limits or cost > limit go to Redis', async () => {
            const [counting, limiter] = counted();
            const at = { now: 500 };
            const lim: Pair[] = [[5, 10], [50, 60]];
            assert.ok((await limiter.checkLimits('c', lim, { ...at, cost: 4 })).allowed);
            const refused = await limiter.checkLimits('c', lim, { ...at, cost: 2 });
            assert.equal(refused.allowed, false);
            assert.deepEqual(await limiter.checkLimits('c', lim, { ...at, cost: 2 }), refused, 'the same cost: the cached reply');
            assert.equal(counting.count('CHECK'), 2);
            // A larger cost is refused as long, but Redis gives it a later retryAfter: the
            // smaller cost's reply would not be the one Redis sends.
            const larger = await limiter.checkLimits('c', lim, { ...at, cost: 3 });
            assert.equal(counting.count('CHECK'), 3, 'a larger cost: Redis');
            assert.equal(larger.allowed, false);
            assert.ok(larger.retryAfter > refused.retryAfter, `retryAfter ${larger.retryAfter} for cost 3, ${refused.retryAfter} for cost 2`);
            assert.deepEqual(await limiter.checkLimits('c', lim, { ...at, cost: 3 }), larger, 'cost 3 cached beside cost 2');
            assert.deepEqual(await limiter.checkLimits('c', lim, { ...at, cost: 2 }), refused);
            assert.equal(counting.count('CHECK'), 3);
            assert.equal((await limiter.checkLimits('c', [[5, 10]], { ...at, cost: 2 })).allowed, false, 'other limits: Redis');
            assert.equal(counting.count('CHECK'), 4);
            const never = await limiter.checkLimits('c', lim, { ...at, cost: 6 });
            assert.deepEqual([never.allowed, never.retryAfter], [false, -1]);
            assert.equal(counting.count('CHECK'), 5, 'cost > limit is not covered by an ordinary refusal');
            assert.ok((await limiter.checkLimits('c', lim, { ...at, cost: 1 })).allowed, 'a smaller cost: Redis');
            assert.equal(counting.count('CHECK'), 6);
          });

          test('never possible (cost > limit) is cached for good; another cost goes to Redis', async () => {
            const [counting, limiter] = counted();
            const first = await limiter.checkLimits('n', [[5, 10], [3, 60]], { cost: 4 });
            assert.deepEqual([first.allowed, first.retryAfter], [false, -1]);
            assert.deepEqual(await limiter.checkLimits('n', [[5, 10], [3, 60]], { cost: 4 }), first);
            assert.equal(counting.count('CHECK'), 1);
            const more = await limiter.checkLimits('n', [[5, 10], [3, 60]], { cost: 9 });
            assert.deepEqual([more.allowed, more.retryAfter, counting.count('CHECK')], [false, -1, 2]);
            assert.ok((await limiter.checkLimits('n', [[5, 10], [3, 60]], { cost: 1 })).allowed);
            assert.equal(counting.count('CHECK'), 3);
          });

          test('refund and reset through the limiter clear the key at once; PEEK bypasses; isAllowed reads it; stats', async () => {
            const [counting, limiter] = counted();
            assert.ok((await limiter.check('a', 1, 60)).allowed);
            const denied = await limiter.check('a', 1, 60);
            assert.equal(denied.allowed, false);
            assert.equal((await limiter.check('a', 1, 60)).allowed, false); // cached
            assert.deepEqual(await limiter.isAllowed('a', 1, 60), [false, denied.count]); // cached
            assert.equal(counting.count('CHECK'), 2);
            assert.equal((await limiter.peek('a', 1, 60)).allowed, false);
            assert.equal(counting.count('PEEK'), 1);
            await limiter.refund('a', 1, 60);
            assert.equal(limiter.denyCache!.size, 0);
            assert.ok((await limiter.check('a', 1, 60)).allowed, 'straight to Redis, allowed again');
            assert.equal((await limiter.check('a', 1, 60)).allowed, false);
            assert.equal(limiter.denyCache!.size, 1);
            await limiter.reset('a');
            assert.equal(limiter.denyCache!.size, 0);
            assert.ok((await limiter.check('a', 1, 60)).allowed, 'after reset: Redis, allowed');
            const s = limiter.denyCache!.stats();
            assert.deepEqual([s.hits, s.stored, s.cleared, s.entries], [2, 2, 2, 0]);
            assert.equal(counting.count('CHECK'), 5);
            // A refund that bypasses the cache clears the key's entries all the same.
            assert.equal((await limiter.check('a', 1, 60)).allowed, false);
            assert.equal(limiter.denyCache!.size, 1);
            await limiter.refund('a', 1, 60, { denyCache: false });
            assert.equal(limiter.denyCache!.size, 0, 'refund with denyCache: false clears the key too');
            assert.ok((await limiter.check('a', 1, 60)).allowed, 'straight to Redis, allowed again');
          });

          test('off by default, and off sends every call; bounded: maxEntries keys, least recently used out', async () => {
            assert.equal(new SlidingWindowRateLimiter(client(backend, lib)).denyCache, undefined);
            const [plain, off] = counted(false);
            for (let i = 0; i < 6; i++) await off.check('o', 1, 60);
            assert.equal(plain.count('CHECK'), 6);
            const [counting, on] = counted();
            for (let i = 0; i < 6; i++) await on.check('o', 1, 60);
            assert.equal(counting.count('CHECK'), 2);
            for (let i = 0; i < 4; i++) await on.check('o', 1, 60, { denyCache: false });
            assert.equal(counting.count('CHECK'), 6, 'denyCache: false on a call bypasses the cache');
            const cache = new DenyCache({ maxEntries: 3 });
            const [, bounded] = counted(cache);
            for (const who of 'abcde') await bounded.check(who, 0, 60); // limit 0: never
            await bounded.check('c', 0, 60); // c used again: d is now the least recent
            await bounded.check('f', 0, 60);
            assert.equal(cache.size, 3);
            assert.equal(cache.stats().evicted, 3);
            assert.deepEqual(heldKeys(cache).map((k) => k.slice(bounded.prefix.length)).sort(), ['c', 'e', 'f']);
            assert.throws(() => new DenyCache({ maxEntries: 0 }), RangeError);
          });
        });
      }
    }

    const floodLib: Lib = index % 2 === 0 ? 'ioredis' : 'node-redis';
    const floodBackend: Backend = index < 2 ? 'module' : 'library';
    test(`flood: ${REQUESTS} requests in ${SPAN_MS / 1000} s from one identity over ${TASKS} tasks reach Redis about once per `
      + `cached interval; without the cache every one does; the same answers (${floodBackend}, ${floodLib})`, async (t) => {
      const port = servers[floodBackend]!.port;
      const judge = judges[floodBackend]!;
      const c = client(floodBackend, floodLib);
      const cachedCount = new Counting(c, floodLib);
      const plainCount = new Counting(c, floodLib);
      const options = { backend: floodBackend, timeoutMs: TIMEOUT_MS };
      const cached = new SlidingWindowRateLimiter(cachedCount, { ...options, prefix: fresh('c'), denyCache: true });
      const plain = new SlidingWindowRateLimiter(plainCount, { ...options, prefix: fresh('p') });
      const base = await checkCalls(port, floodBackend);
      // 100 ms after the server's next second begins, both floods on the same schedule.
      const off = await serverOffset(judge);
      const serverNow = performance.now() + off;
      const start = (Math.floor(serverNow / 1000) + 1) * 1000 + 100 - off;
      const [withCache, without] = await Promise.all([flood(cached, start), flood(plain, start)]);
      const total = await checkCalls(port, floodBackend) - base;
      const callsCached = cachedCount.count('CHECK');
      const callsPlain = plainCount.count('CHECK');
      assert.equal(callsPlain, REQUESTS, 'without the cache every request reaches Redis');
      assert.equal(total, callsCached + callsPlain, 'INFO commandstats agrees with the counts');
      const stats = cached.denyCache!.stats();
      const allowedC = withCache.filter(([a]) => a).length;
      const allowedP = without.filter(([a]) => a).length;
      const refusedCalls = callsCached - allowedC;
      const seconds = SPAN_MS / 1000 + 1;
      // At most one refused call per cached interval: each refusal that reached Redis began one.
      assert.ok(refusedCalls <= stats.stored, `${refusedCalls} refused calls, ${stats.stored} stored`);
      assert.ok(stats.stored <= TASKS + 25 * seconds, JSON.stringify(stats));
      // Request for request the same answer, except among the first requests of a server
      // second: the server decided between the send and the answer.
      const offEnd = await serverOffset(judge);
      const nearStart = ([, sent, done]: Answer): boolean => {
        const s = sent + offEnd;
        const d = done + offEnd;
        return s % 1000 < 300 || s % 1000 > 995 || Math.floor(s / 1000) !== Math.floor(d / 1000);
      };
      const differ = withCache.map((a, i) => i).filter((i) => withCache[i]![0] !== without[i]![0]);
      const unexplained = differ.filter((i) => !nearStart(withCache[i]!) && !nearStart(without[i]!));
      t.diagnostic(`CHECK calls ${callsCached} with the cache (allowed ${allowedC}, refused ${refusedCalls}, stored `
        + `${stats.stored}, hits ${stats.hits}, waits ${stats.waits}), ${callsPlain} without (allowed ${allowedP}); `
        + `${differ.length} answers differ, ${unexplained.length} outside a second's first 300 ms`);
      assert.deepEqual(unexplained, []);
      // On the same schedule (both floods run together), each server second allows its 10 in both.
      assert.equal(allowedC, allowedP, 'as many allowed with the cache as without');
      assert.ok(allowedC <= 10 * seconds && allowedP <= 10 * seconds + 10);
    });

    const sfLib: Lib = index % 2 === 0 ? 'node-redis' : 'ioredis';
    const sfBackend: Backend = index < 2 ? 'library' : 'module';
    test(`an ended entry: its key's calls go to Redis one at a time, the others wait for the answer; off, all at once (${sfBackend}, ${sfLib})`, async (t) => {
      const limits: Pair[] = [[1, 100]];
      const burst = 20;
      for (const denyCache of [true, false]) {
        const counting = new Counting(client(sfBackend, sfLib), sfLib);
        const limiter = new SlidingWindowRateLimiter(counting, { prefix: fresh('w'), denyCache, backend: sfBackend, timeoutMs: TIMEOUT_MS });
        const key = limiter.key('w');
        assert.ok((await limiter.checkLimits('w', limits, { ms: true })).allowed);
        // Refused next, unless the two calls straddled a 100 ms boundary (1 request just
        // before one weighs 0 just after): then again.
        let refused = await limiter.checkLimits('w', limits, { ms: true });
        for (let i = 0; i < 4 && refused.allowed; i++) refused = await limiter.checkLimits('w', limits, { ms: true });
        assert.equal(refused.allowed, false);
        if (denyCache) await spinUntil(entryOf(limiter.denyCache!, key)!.deadline);
        counting.maxInFlight.set(key, 0);
        const sent = counting.count('CHECK', key);
        const answers = await Promise.all(Array.from({ length: burst }, () => limiter.checkLimits('w', limits, { ms: true })));
        const calls = counting.count('CHECK', key) - sent;
        const allowed = answers.filter((a) => a.allowed).length;
        if (denyCache) {
          const stats = limiter.denyCache!.stats();
          t.diagnostic(`cache: ${calls} CHECKs for ${burst} concurrent calls, ${allowed} allowed, waits ${stats.waits}, hits ${stats.hits}`);
          assert.equal(counting.maxInFlight.get(key), 1, 'one CHECK of the key in flight at a time');
          assert.ok(stats.waits >= burst - 1, `waits ${stats.waits}`);
          assert.ok(calls >= 1 && calls < burst, `${calls} CHECKs`);
        } else {
          t.diagnostic(`off: ${calls} CHECKs, at most ${counting.maxInFlight.get(key)} in flight at once`);
          assert.equal(calls, burst);
          assert.ok(counting.maxInFlight.get(key)! > 1);
        }
        assert.ok(allowed <= 1, `${allowed} allowed`);
      }
    });

    // --- the stores: on by default, false bypasses ---------------------------------------
    test('stores: the cache is on by default (express over HTTP: one CHECK for the first refusal only), false bypasses it', async () => {
      const counting = new Counting(client('module', 'ioredis'), 'ioredis');
      const store = new SlidingWindowStore({ client: counting, prefix: fresh('e'), timeoutMs: TIMEOUT_MS });
      assert.ok(store.limiter.denyCache instanceof DenyCache);
      const app = express();
      app.use(rateLimit({ windowMs: 60000, limit: 2, store }));
      app.get('/', (_req, res) => { res.send('ok'); });
      const http = await listening(app.listen(0, '127.0.0.1'));
      try {
        assert.deepEqual(await statuses(http.url, 6), [200, 200, 429, 429, 429, 429]);
        const last = await fetch(http.url);
        assert.equal(last.status, 429);
        assert.ok(Number(last.headers.get('retry-after')) >= 1);
        assert.equal(counting.count('CHECK'), 3, 'the first refusal only');
      } finally {
        await http.close();
      }
      // false: the store's calls bypass the limiter's own cache, which it leaves alone.
      const mine = new DenyCache();
      const counting2 = new Counting(client('module', 'node-redis'), 'node-redis');
      const limiter = new SlidingWindowRateLimiter(counting2, { prefix: fresh('e'), denyCache: mine, timeoutMs: TIMEOUT_MS });
      const off = new SlidingWindowStore({ limiter, denyCache: false });
      off.init({ windowMs: 60000, limit: 1 });
      for (let i = 0; i < 4; i++) await off.increment('k');
      assert.equal(counting2.count('CHECK'), 4);
      assert.equal(limiter.denyCache, mine);
      assert.equal(mine.size, 0);
      // true on a limiter without one gives it a default; a DenyCache sets that one.
      const bare = new SlidingWindowRateLimiter(counting2, { prefix: fresh('e') });
      new SlidingWindowStore({ limiter: bare });
      assert.ok(bare.denyCache instanceof DenyCache);
      const given = new DenyCache({ maxEntries: 5 });
      new SlidingWindowStore({ limiter: bare, denyCache: given });
      assert.equal(bare.denyCache, given);
    });

    test('stores: fastify and nest answer refusals from the cache by default, and send every CHECK with false', async () => {
      for (const denyCache of [undefined, false]) {
        const counting = new Counting(client('library', 'node-redis'), 'node-redis');
        const Store = fastifyStore({ client: counting, prefix: fresh('f'), backend: 'library', timeoutMs: TIMEOUT_MS, denyCache });
        const store = new Store().child({ routeInfo: { method: 'GET', url: '/x' } });
        const incr = (): Promise<{ current: number; ttl: number }> => new Promise((ok, fail) => {
          store.incr('ip', (err, r) => (err ? fail(err) : ok(r!)), 60000, 2);
        });
        const got: number[] = [];
        for (let i = 0; i < 5; i++) got.push((await incr()).current);
        assert.deepEqual(got, [1, 2, 3, 3, 3]);
        assert.equal(counting.count('CHECK'), denyCache === false ? 5 : 3, `fastify, denyCache ${denyCache}`);

        const nestCount = new Counting(client('library', 'ioredis'), 'ioredis');
        const nest = new SlidingWindowThrottlerStorage({
          client: nestCount, prefix: fresh('n'), backend: 'library', timeoutMs: TIMEOUT_MS, denyCache,
        });
        const blocked: boolean[] = [];
        for (let i = 0; i < 5; i++) blocked.push((await nest.increment('ip', 60000, 2, 0)).isBlocked);
        assert.deepEqual(blocked, [false, false, true, true, true]);
        assert.equal(nestCount.count('CHECK'), denyCache === false ? 5 : 3, `nest, denyCache ${denyCache}`);
        assert.equal(nest.limiter.denyCache === undefined, denyCache === false);
      }
    });
  });
}

// --- outages ----------------------------------------------------------------------------

const outageKind = selected.find((k) => k.skip === false);
describe('deny cache in an outage', { skip: outageKind === undefined ? 'no server binary' : false }, () => {
  for (const lib of LIBS) {
    test(`a cached refusal holds while nobody noticed; once a call finds the outage the cache is emptied and bypassed (${lib})`, async () => {
      const server = await startServer(outageKind!.name as KindName);
      const handle = await connect(lib, server.port);
      const quiet = { warn: () => undefined, error: () => undefined };
      const limiter = new SlidingWindowRateLimiter(handle.client, { denyCache: true, probeIntervalMs: 200, timeoutMs: 300, logger: quiet });
      try {
        assert.ok((await limiter.check('a', 1, 60)).allowed);
        assert.equal((await limiter.check('a', 1, 60)).allowed, false);
        await server.stop();
        const cached = await limiter.check('a', 1, 60);
        assert.deepEqual([cached.allowed, cached.degraded], [false, false], 'from the cache');
        assert.equal((await limiter.check('b', 1, 60)).degraded, true, 'reaches the circuit: an outage');
        const got = await limiter.check('a', 1, 60);
        assert.deepEqual([got.allowed, got.degraded], [true, true], 'fail-open, as without the cache');
        assert.equal(limiter.denyCache!.size, 0);
      } finally {
        await handle.close();
        await server.cleanup();
      }
    });
  }
});
