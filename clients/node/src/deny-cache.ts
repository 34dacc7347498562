/**
 * An exact local cache of refusals: denials that cost Redis nothing (the Python client's
 * `slidingwindow.deny_cache`, with the same guarantees and defaults).
 *
 * A refused CHECK's `retry_after` is the smallest time after which the same request, with
 * no other traffic, is allowed; other traffic only raises the counts. So until then the
 * same request (same key, same limits, the same or a larger cost) is refused, and a client
 * that remembers the refusal answers exactly what Redis would answer, without asking it.
 * `DenyCache` remembers, per key, limits and cost (a larger cost would get a longer
 * `retry_after` from Redis), the last refusal and the client instant (`performance.now()`,
 * ms) before which Redis cannot allow it, computed on the safe side:
 *
 * - Redis decided at some instant between sending and receiving: the deadline is counted
 *   from the send (`tSend`), so it can only come early.
 * - Milliseconds (`ms`, server clock): the server's clock is an integer number of ms, so a
 *   refusal at ms `s` with `retry_after = r` is refused through `s + r - 1`; allowed from
 *   `s + r`. The entry refuses while `t < tSend + (r - 1) ms`.
 * - Seconds (server clock): the server floors its clock to seconds, so a `retry_after` of
 *   `r` means "from the start of second `S + r`", which can be as little as `r - 1` seconds
 *   and 1 ms away. Alone, that gives `tSend + (r - 1) s`, useless for `r = 1`. When the
 *   cache knows the server clock's offset to its own (a `TIME` call, measured as an
 *   interval `[lo, hi]` from the call's send and receive instants, renewed every
 *   `clockRefreshMs`), the second `S` is at least `floor((tSend + lo) / 1000)` and the
 *   server reaches `(S + r) * 1000` no earlier than the client instant
 *   `(S + r) * 1000 - hi`: the entry lasts until the larger of the two bounds.
 * - Explicit `now` (the caller's clock): exact in units, `now0 <= now < now0 + r`.
 * - Both clocks are assumed to run at the same rate; a margin (1 ms plus 500 ppm of the
 *   interval and of the offset's age) covers slewing. A server clock that jumps forward (a
 *   wall-clock step) can end a refusal early on the server: not covered.
 * - `cost > limit` (`retry_after = -1` on a refusal) is never allowed: cached without end.
 *
 * What can make a cached refusal wrong, until its `retry_after` at the most: a REFUND, a
 * DEL or an eviction of the key by another process (a refund or `reset` through the
 * limiter that owns the cache clears the key's entries at once), or writers of the same
 * key whose explicit `now` runs ahead of the server clock.
 *
 * A cached answer has the fields Redis would send: `retryAfter` and `resetAfter` counted
 * down by the whole units that have surely elapsed since the reply (so they are never
 * shorter than Redis's), per-limit `retryAfter` turned to -1 once that limit alone surely
 * allows, `count` and `remaining` as refused (for cost 1, `remaining` is 0, as Redis says).
 *
 * One call at a time per key and limits goes to Redis while nothing is cached for them (a
 * first call, or a refusal's entry has ended): the others wait for its answer (a single
 * flight), and are answered from it if it is a refusal. After an allowed answer that leaves
 * `remaining` quota, that many waiters (`remaining / cost`, less those already on their way)
 * go to Redis at once, the next one leads a new flight and the rest wait for it: calls on a
 * key far from its limit are not held up, and a flood on one identity reaches Redis about
 * `limit` + 1 times per cached interval, not once per concurrent request. With `now` given
 * (the caller's clock) calls are never held. (The Python client's, rule for rule.)
 */
import { MultiLimitResult, RateLimitResult } from './result';

/** Redis keys held at the most, by default. */
export const DEFAULT_MAX_ENTRIES = 10_000;
const PPM = 500e-6; // clock rates may differ by this much (NTP slews at most 500 ppm)
const MARGIN_MS = 1; // taken off every deadline
const WAIT_TIMEOUT_MS = 5000; // a call waits for another call on the same key this long at the most
const CLOCK_SAMPLES = 3; // TIME calls per measurement of the offset; the narrowest is kept
const MAX_PER_KEY = 8; // entries (limit sets x costs x clock kinds) kept under one Redis key

/** Where one CHECK (or REFUND) meets the cache. */
export interface DenySpec {
  readonly key: string;
  /** [limit, window] pairs, in call order. */
  readonly limits: ReadonlyArray<readonly [number, number]>;
  readonly ms: boolean;
  /** The caller's clock; undefined: the server's. */
  readonly now: number | undefined;
  readonly cost: number;
  readonly refund: boolean;
  /** slotOf(this), when the caller keeps it for its calls with the same limits (else made here). */
  readonly slot?: string;
}

// The cost too: a larger cost is refused as long, but Redis answers it a longer
// retry_after (and other counts), so only the same request gets the cached reply.
/** @internal Where a call's entry is kept under its key: its unit, clock, limits and cost. */
export function slotOf(spec: Pick<DenySpec, 'limits' | 'ms' | 'now' | 'cost'>): string {
  return `${spec.ms ? 'ms' : 's'}${spec.now === undefined ? '' : '@'}:${spec.limits.map(([l, w]) => `${l}/${w}`).join(',')}x${spec.cost}`;
}

const RESOLVED: Promise<void> = Promise.resolve();

function nextTurn(): Promise<void> {
  return new Promise((ok) => { setImmediate(ok); });
}

/**
 * A call on its way to Redis that others may wait for. Its promise is made only when a
 * call waits (most flights have nobody waiting: an allowed call on a key of its own).
 */
class Flight {
  private waited: Promise<void> | undefined;
  private wake: (() => void) | undefined;
  private over = false;

  get promise(): Promise<void> {
    if (this.over) return RESOLVED;
    if (this.waited === undefined) this.waited = new Promise<void>((ok) => { this.wake = ok; });
    return this.waited;
  }

  resolve(): void {
    this.over = true;
    this.wake?.();
  }
}

function flight(): Flight {
  return new Flight();
}

interface Entry {
  /** slotOf(spec): which of its key's entries this is. */
  readonly slot: string;
  /** undefined: no refusal yet (a first call's flight). */
  result: MultiLimitResult | undefined;
  never: boolean;
  /** performance.now() ms (server clock); units (explicit now). */
  deadline: number;
  /** tRecv (server clock), or now0 (explicit now). */
  origin: number;
  /** A call on its way to Redis, the others wait for it. */
  flight: Flight | undefined;
  waiters: number;
  /** Waiters that may go to Redis at once (the quota an allowed call left). */
  tickets: number;
  /** Calls on their way to Redis with a ticket. */
  direct: number;
}

/**
 * The entries under one Redis key, oldest first: an array, not a Map, since it holds one
 * entry nearly always (at most MAX_PER_KEY) and every allowed call on a key of its own makes
 * and drops one (a Map per call was a third of the cache's cost on that path).
 */
type Held = Entry[];

function find(held: Held, slot: string): Entry | undefined {
  for (const e of held) if (e.slot === slot) return e;
  return undefined;
}

/** Puts `entry` in its slot's place, or last, the oldest out when the key has MAX_PER_KEY. */
function put(held: Held, entry: Entry): void {
  const at = held.findIndex((e) => e.slot === entry.slot);
  if (at >= 0) {
    held[at] = entry;
    return;
  }
  if (held.length >= MAX_PER_KEY) wake(held.shift()!);
  held.push(entry);
}

function remove(held: Held, slot: string): void {
  const at = held.findIndex((e) => e.slot === slot);
  if (at >= 0) held.splice(at, 1);
}

/** What `enter` gives a call that goes to Redis with a ticket (in the place of a flight). */
const TICKET: Flight = new Flight();
TICKET.resolve();

/**
 * What the cache answered, for metrics: `hits` answered without Redis, `misses` consulted
 * and sent to Redis, `stored` refusals remembered, `expired` entries that ended, `cleared`
 * by a refund, a reset or `forget`, `evicted` by the size bound, `waits` calls that waited
 * for another call on the same key, `entries` held now.
 */
export interface DenyCacheStats {
  hits: number;
  misses: number;
  stored: number;
  expired: number;
  cleared: number;
  evicted: number;
  waits: number;
  entries: number;
}

export interface DenyCacheOptions {
  /** Redis keys held at the most, least recently used first out. Default 10,000. */
  maxEntries?: number;
  /**
   * ms between two measurements of the server clock's offset (three `TIME` calls, the
   * narrowest kept), which lets second-unit refusals last their whole interval; 0 never
   * measures (then a seconds refusal lasts `retryAfter - 1` seconds). Default 10,000.
   * Never measured through a cluster client (a cluster's nodes need not share a clock).
   */
  clockRefreshMs?: number;
}

/** The server clock's offset to performance.now(), in ms: server = client + off, off in [lo, hi]; measured at `at`. */
interface Clock { lo: number; hi: number; at: number }

/** Whole units surely elapsed on the server since the refusal (a lower bound). */
function elapsedUnits(spec: DenySpec, entry: Entry, t: number): number {
  if (spec.now !== undefined) return Math.max(0, spec.now - entry.origin);
  const elapsedMs = t - entry.origin;
  return Math.max(0, Math.floor(spec.ms ? elapsedMs : elapsedMs / 1000));
}

function countDown(result: MultiLimitResult, cost: number, e: number): MultiLimitResult {
  if (e === 0) return result;
  const one = (r: RateLimitResult, summary: boolean, retryFloor?: number): RateLimitResult => {
    let retry = r.retryAfter;
    if (retry > 0) {
      retry -= e;
      if (retry <= 0) retry = retryFloor ?? -1; // surely elapsed: this limit alone allows now
    }
    const alone = r.allowed || (retry === -1 && cost <= r.limit);
    return new RateLimitResult(summary ? false : alone, r.count, r.limit, r.remaining, retry,
      Math.max(0, r.resetAfter - e), r.window, r.ms, r.degraded);
  };
  // The summary's retryAfter never reaches -1 while refused: the entry ends first.
  const summary = one(result.summary, true, 1);
  const limits = result.limits.length === 1 ? [summary] : result.limits.map((r) => one(r, false));
  return new MultiLimitResult(summary, limits, result.governing);
}

/**
 * Refusals remembered until Redis could first allow the same request. One per process (or
 * per limiter): nothing is shared between processes. Single-threaded like the event loop;
 * `stats()` gives the counters (hits, entries, ...) to export to metrics.
 */
export class DenyCache {
  readonly maxEntries: number;
  readonly clockRefreshMs: number;
  private readonly keys = new Map<string, Held>();
  private readonly counters: DenyCacheStats = {
    hits: 0, misses: 0, stored: 0, expired: 0, cleared: 0, evicted: 0, waits: 0, entries: 0,
  };
  private clears = 0; // bumped by every forget: a call in flight across one stores nothing
  private clock: Clock | undefined;
  private clockBusy = false;

  constructor(options: DenyCacheOptions = {}) {
    const maxEntries = options.maxEntries ?? DEFAULT_MAX_ENTRIES;
    if (!Number.isInteger(maxEntries) || maxEntries < 1) throw new RangeError('maxEntries must be an integer >= 1');
    this.maxEntries = maxEntries;
    this.clockRefreshMs = options.clockRefreshMs ?? 10_000;
  }

  // --- what users call ------------------------------------------------------------------

  stats(): DenyCacheStats {
    return { ...this.counters, entries: this.size };
  }

  /** Entries held now (limit sets under each key, summed). */
  get size(): number {
    let n = 0;
    for (const held of this.keys.values()) n += held.length;
    return n;
  }

  /** Drops every refusal held for the Redis key `key` (e.g. after deleting it yourself). */
  forget(key: string): void {
    this.clears += 1;
    const held = this.keys.get(key);
    if (held === undefined) return;
    this.keys.delete(key);
    this.counters.cleared += held.length;
    for (const entry of held) wake(entry);
  }

  /** Drops everything. */
  clear(): void {
    this.clears += 1;
    for (const held of this.keys.values()) for (const entry of held) wake(entry);
    this.keys.clear();
  }

  // --- the limiter's hook ---------------------------------------------------------------

  /**
   * `call()` through the cache (the limiter's CHECK or REFUND). `time`, when given, sends a
   * TIME to the key's server (for the seconds offset). The lookup happens synchronously,
   * when `run` is called.
   * @internal
   */
  async run(spec: DenySpec, call: () => Promise<MultiLimitResult>,
    time: (() => Promise<unknown>) | undefined): Promise<MultiLimitResult> {
    if (spec.refund) {
      this.forget(spec.key);
      try {
        return await call();
      } finally {
        this.forget(spec.key);
      }
    }
    const slot = spec.slot ?? slotOf(spec);
    let lead: Flight | undefined;
    for (;;) {
      const [hit, led, wait] = this.enter(spec, slot);
      if (hit !== undefined) {
        // Answered on the event loop's next turn, as a reply from Redis would be: an answer
        // in the same I/O callback as the request made each refused HTTP request cost its
        // app more than a round trip to Redis (Express hot traffic, saturated: 5,400 vs
        // 5,800 req/s; with this, 5,900-6,000).
        await nextTurn();
        return hit;
      }
      if (wait === undefined) {
        lead = led;
        break;
      }
      await waitFor(wait);
      this.left(spec.key, slot);
    }
    const clears = this.clears;
    const tSend = performance.now();
    let answer: MultiLimitResult;
    try {
      answer = await call();
    } catch (err) {
      this.done(spec, slot, lead, undefined, clears, tSend, tSend);
      throw err;
    }
    const tRecv = performance.now();
    if (time !== undefined && this.wantsClock(spec, answer)) await this.measure(time);
    this.done(spec, slot, lead, answer, clears, tSend, tRecv);
    return answer;
  }

  // --- inside ---------------------------------------------------------------------------

  /** [a cached refusal to answer; the flight this call leads; a flight to wait for]. */
  private enter(spec: DenySpec, slot: string): [MultiLimitResult | undefined, Flight | undefined, Flight | undefined] {
    const t = performance.now();
    let held = this.keys.get(spec.key);
    const entry = held === undefined ? undefined : find(held, slot);
    if (held === undefined || entry === undefined) {
      this.counters.misses += 1;
      if (spec.now !== undefined) return [undefined, undefined, undefined];
      // The first call leads a flight; calls meanwhile wait for its answer.
      if (held === undefined) {
        held = [];
        this.keys.set(spec.key, held);
      }
      const fresh: Entry = { slot, result: undefined, never: false, deadline: -Infinity, origin: t, flight: flight(), waiters: 0, tickets: 0, direct: 0 };
      put(held, fresh);
      return [undefined, fresh.flight, undefined];
    }
    this.keys.delete(spec.key); // most recently used: last out
    this.keys.set(spec.key, held);
    const live = entry.never
      || (spec.now === undefined && t < entry.deadline)
      || (spec.now !== undefined && entry.origin <= spec.now && spec.now < entry.deadline);
    if (live && entry.result !== undefined) {
      this.counters.hits += 1;
      return [countDown(entry.result, spec.cost, elapsedUnits(spec, entry, t)), undefined, undefined];
    }
    if (live || spec.now !== undefined) {
      this.counters.misses += 1;
      return [undefined, undefined, undefined];
    }
    // Ended: what an allowed answer left goes at once, then one call at a time goes to
    // Redis; the others wait for its answer.
    if (entry.tickets > 0) {
      entry.tickets -= 1;
      entry.direct += 1;
      this.counters.misses += 1;
      return [undefined, TICKET, undefined];
    }
    if (entry.flight !== undefined) {
      entry.waiters += 1;
      this.counters.waits += 1;
      return [undefined, undefined, entry.flight];
    }
    if (entry.deadline !== -Infinity) {
      this.counters.expired += 1;
      entry.deadline = -Infinity;
    }
    entry.flight = flight();
    this.counters.misses += 1;
    return [undefined, entry.flight, undefined];
  }

  private left(key: string, slot: string): void {
    const held = this.keys.get(key);
    const entry = held === undefined ? undefined : find(held, slot);
    if (entry !== undefined && entry.waiters > 0) entry.waiters -= 1;
  }

  private wantsClock(spec: DenySpec, answer: MultiLimitResult): boolean {
    if (spec.ms || spec.now !== undefined || !(this.clockRefreshMs > 0)) return false;
    if (answer.allowed || answer.degraded || this.clockBusy) return false;
    const fresh = this.clock !== undefined && performance.now() - this.clock.at < this.clockRefreshMs;
    if (!fresh) this.clockBusy = true;
    return !fresh;
  }

  private async measure(time: () => Promise<unknown>): Promise<void> {
    try {
      for (let i = 0; i < CLOCK_SAMPLES; i++) {
        const c1 = performance.now();
        const reply = await time();
        this.setClock(reply, c1, performance.now());
      }
    } catch {
      // no offset: the deadline falls back to retryAfter - 1 seconds
    } finally {
      this.clockBusy = false;
    }
  }

  private setClock(reply: unknown, c1: number, c2: number): void {
    if (!Array.isArray(reply) || reply.length < 2) throw new TypeError('TIME: unexpected reply');
    const serverMs = Number(reply[0]) * 1000 + Number(reply[1]) / 1000;
    if (!Number.isFinite(serverMs)) throw new TypeError('TIME: unexpected reply');
    const clock: Clock = { lo: serverMs - c2, hi: serverMs - c1, at: c2 };
    const old = this.clock;
    // Keep the narrower of the two while the old one is young.
    if (old === undefined || clock.hi - clock.lo <= old.hi - old.lo || c2 - old.at >= this.clockRefreshMs) {
      this.clock = clock;
    }
  }

  private deadline(spec: DenySpec, result: MultiLimitResult, tSend: number): number {
    const r = result.retryAfter;
    if (spec.now !== undefined) return spec.now + r;
    if (spec.ms) {
      const span = r - 1;
      return tSend + span - MARGIN_MS - PPM * span;
    }
    let span = (r - 1) * 1000;
    let best = tSend + span - MARGIN_MS - PPM * span;
    const clock = this.clock;
    if (clock !== undefined) {
      const age = tSend - clock.at;
      const second = Math.floor((tSend + clock.lo) / 1000);
      const end = (second + r) * 1000 - clock.hi; // client performance.now() ms
      span = end - tSend;
      best = Math.max(best, end - MARGIN_MS - PPM * (span + Math.abs(age)));
    }
    return best;
  }

  private done(spec: DenySpec, slot: string, led: Flight | undefined, answer: MultiLimitResult | undefined,
    clears: number, tSend: number, tRecv: number): void {
    let held = this.keys.get(spec.key);
    const entry = held === undefined ? undefined : find(held, slot);
    let lead = led;
    if (lead === TICKET) {
      lead = undefined;
      if (entry !== undefined && entry.direct > 0) entry.direct -= 1;
    }
    if (lead !== undefined && entry !== undefined && entry.flight === lead) entry.flight = undefined;
    const refused = answer !== undefined && !answer.allowed && !answer.degraded && clears === this.clears;
    if (refused) {
      const never = answer.retryAfter < 0;
      const fresh: Entry = {
        slot,
        result: answer,
        never,
        deadline: never ? Infinity : this.deadline(spec, answer, tSend),
        origin: spec.now ?? tRecv,
        flight: entry?.flight,
        waiters: entry?.waiters ?? 0,
        tickets: 0,
        direct: entry?.direct ?? 0,
      };
      if (held === undefined) held = [];
      else this.keys.delete(spec.key);
      put(held, fresh);
      this.keys.set(spec.key, held); // most recently used: last out
      this.counters.stored += 1;
      while (this.keys.size > this.maxEntries) {
        const [oldest, dropped] = this.keys.entries().next().value as [string, Held];
        this.keys.delete(oldest);
        this.counters.evicted += dropped.length;
        for (const gone of dropped) wake(gone);
      }
    } else if (entry !== undefined && held !== undefined && entry.deadline === -Infinity) {
      const over = answer === undefined || answer.degraded || entry.waiters === 0;
      if (lead !== undefined && !over && answer !== undefined) {
        // Allowed with calls waiting: as many as the quota left go at once (less those on their way already).
        const left = Math.floor(answer.summary.remaining / spec.cost) - entry.direct;
        entry.tickets = Math.max(0, Math.min(entry.waiters, left));
      }
      if (over && entry.flight === undefined && entry.direct === 0) {
        // Allowed with nobody waiting, failed or degraded: nothing to remember.
        remove(held, slot);
        if (held.length === 0) this.keys.delete(spec.key);
      }
    }
    lead?.resolve();
  }
}

function wake(entry: Entry): void {
  if (entry.flight !== undefined) {
    entry.flight.resolve();
    entry.flight = undefined;
  }
}

function waitFor(f: Flight): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<void>((ok) => { timer = setTimeout(ok, WAIT_TIMEOUT_MS); });
  return Promise.race([f.promise, timeout]).finally(() => clearTimeout(timer));
}

/** The `denyCache` option: false/undefined off, true a default cache, or the cache to use. */
export type DenyCacheOption = boolean | DenyCache | undefined;

export function makeDenyCache(option: DenyCacheOption): DenyCache | undefined {
  if (option instanceof DenyCache) return option;
  return option === true ? new DenyCache() : undefined;
}

/**
 * What a store's `denyCache` does to its limiter: true (the stores' default) gives it a
 * default cache unless it has one, a DenyCache sets that one, false leaves the limiter as it
 * is (the store's own calls then bypass any cache). Returns whether the store's calls use it.
 */
export function attachDenyCache(limiter: { denyCache: DenyCache | undefined }, option: DenyCacheOption): boolean {
  if (option instanceof DenyCache) limiter.denyCache = option;
  else if (option !== false && limiter.denyCache === undefined) limiter.denyCache = new DenyCache();
  return option !== false;
}
