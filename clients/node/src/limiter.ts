/**
 * The limiter: one SLIDINGWINDOW.CHECK (or FCALL slidingwindow_check) per request, several
 * limits in one call, DETAILS as typed results, and the outage circuit.
 */
import { adapterFor, type Adapter, type RedisClientLike, type Sender, type Spare } from './adapters';
import { BackendState, primariesOf, type Backend, type Op } from './backend';
import { Circuit, type Logger } from './circuit';
import { DenyCache, makeDenyCache, slotOf, type DenyCacheOption, type DenySpec } from './deny-cache';
import { asPermissionError } from './permissions';
import { MS_WITH_RATE_STRING, parseLimits } from './rates';
import { MultiLimitResult, RateLimitResult, ints, type Limit, type WindowCounts } from './result';
import { Timeouts } from './timeouts';
import { pauseBeforeRetry, type WaitOptions } from './wait';

export type { Backend } from './backend';

export interface LimiterOptions {
  /** Put before every client id to make its key. Default "rate:". */
  prefix?: string;
  /** During an outage, allow (true, the default) or deny every request. */
  failOpen?: boolean;
  /** Called with every error of a call to Redis that is an outage (not for calls answered without Redis). */
  onError?: (err: Error) => void;
  /** Milliseconds between two background probes during an outage. Default 1000. */
  probeIntervalMs?: number;
  /** Where the outage warning and recovery line go. Default `console`. */
  logger?: Logger;
  /** A call without a reply after this many ms is an outage (0: wait for ever). Default 500. */
  timeoutMs?: number;
  /**
   * "auto" (default): the module when the server has it, else the Functions library, loaded
   * by the limiter where it is missing or older (see backend.ts); "module" or "library" force one.
   */
  backend?: Backend;
  /**
   * Remember refusals until Redis could first allow them, and answer them without Redis
   * (see DenyCache): true for a default `DenyCache`, or one of your own. Off by default
   * here, on by default in the stores.
   */
  denyCache?: DenyCacheOption;
}

export interface CallOptions {
  /** How much this request counts (>= 1). Default 1. */
  cost?: number;
  /** Windows and `now` are in milliseconds (always, and not to be set, with a rate string). */
  ms?: boolean;
  /** The current time in the call's unit; default the server's clock. */
  now?: number;
  /** false: this call neither reads nor fills the limiter's deny cache. Default true (when it has one). */
  denyCache?: boolean;
}

/** A rate string ("10/second;1000/hour", sent in ms), or limits / [limit, window] pairs (seconds unless `ms`). */
export type LimitsSpec = string | ReadonlyArray<Limit | readonly [number, number]>;

/**
 * The limits and the call's options: a rate string's windows are in ms, so its call sends MS
 * (and `ms: true` with one is an error: the string carries its own unit).
 */
function toLimits(spec: LimitsSpec, options: CallOptions): [Limit[], CallOptions] {
  if (typeof spec === 'string') {
    if (options.ms === true) throw new RangeError(MS_WITH_RATE_STRING);
    return [parseLimits(spec), { ...options, ms: true }];
  }
  const list = spec.map((l) => (Array.isArray(l) ? { limit: l[0] as number, window: l[1] as number } : l as Limit));
  if (list.length === 0) throw new RangeError('at least one limit is needed');
  return [list, options];
}

function num(name: string, v: number): string {
  if (!Number.isSafeInteger(v) || v < 0) throw new RangeError(`${name} must be a non-negative safe integer, got ${v}`);
  return String(v);
}

function limitArgs(limits: readonly Limit[], o: CallOptions): string[] {
  const [first, ...rest] = limits as [Limit, ...Limit[]];
  const args = [num('limit', first.limit), num('window', first.window)];
  if (o.now !== undefined) args.push(num('now', o.now));
  for (const l of rest) args.push('LIMIT', num('limit', l.limit), num('window', l.window));
  if (o.cost !== undefined && o.cost !== 1) args.push('COST', num('cost', o.cost));
  if (o.ms === true) args.push('MS');
  args.push('DETAILS');
  return args;
}

/**
 * What one limit's calls send, kept for the next call with the same limit, window, unit
 * and cost (a store's calls all have the same): the arguments, the limits, the windows and
 * the deny cache's slot. Read-only once made (the arrays are never changed by a call).
 */
interface OneLimit {
  readonly limit: number;
  readonly window: number;
  readonly ms: boolean;
  readonly cost: number | undefined;
  readonly args: string[];
  readonly limits: Limit[];
  readonly windows: number[];
  readonly pairs: ReadonlyArray<readonly [number, number]>;
  readonly slot: string;
}

/** What guarded() answers for a call answered without Redis (the circuit open). */
const WITHOUT: unique symbol = Symbol('answered without Redis');

const summaryOf = (m: MultiLimitResult): RateLimitResult => m.summary;

export class SlidingWindowRateLimiter {
  readonly prefix: string;
  readonly circuit: Circuit;
  readonly timeoutMs: number;
  /** The refusals answered without Redis (undefined: none); may be set or replaced at any time. */
  denyCache: DenyCache | undefined;
  private readonly adapter: Adapter;
  /** Which code answers (module, FCALL, EVALSHA), found on the first call and again after FUNCTION FLUSH or a failover. */
  readonly backendState: BackendState;
  /** The spare connection whose probe closed the circuit, used while the client still reconnects. */
  private bridge: Spare | undefined;
  /** Cancels the watch that retires the bridge when the client is ready (or closed) again. */
  private unwatch: (() => void) | undefined;
  /** The timer of every call's timeoutMs (undefined: no timeout). */
  private readonly timeouts: Timeouts | undefined;
  /** A cluster's TIME goes to some node, whose clock need not be the key's node's. */
  private readonly clustered: boolean;
  private readonly adapterPrimaries: () => ReturnType<Adapter['primaries']>;
  /** The last single-limit call's arguments (see OneLimit). */
  private last: OneLimit | undefined;

  constructor(client: RedisClientLike, options: LimiterOptions = {}) {
    this.adapter = adapterFor(client);
    this.prefix = options.prefix ?? 'rate:';
    this.timeoutMs = options.timeoutMs ?? 500;
    this.timeouts = this.timeoutMs > 0 && Number.isFinite(this.timeoutMs) ? new Timeouts(this.timeoutMs) : undefined;
    this.clustered = /cluster/i.test(this.adapter.kind);
    this.adapterPrimaries = () => this.adapter.primaries();
    const logger = options.logger ?? console;
    this.backendState = new BackendState(options.backend ?? 'auto', (message) => logger.warn(message));
    this.circuit = new Circuit(options);
    this.denyCache = makeDenyCache(options.denyCache);
  }

  /** The Redis key of an id: `prefix + id` (e.g. for `denyCache.forget(limiter.key(id))`). */
  key(id: string): string {
    return this.prefix + id;
  }

  /** "module" or "library" once the first call found out; "auto" before. */
  get backend(): Backend {
    const { mode, confirmed, choice } = this.backendState;
    if (mode === undefined || !confirmed) return choice;
    return mode === 'module' ? 'module' : 'library';
  }

  get failOpen(): boolean {
    return this.circuit.failOpen;
  }

  /**
   * The seed's call: [allowed, count], with the seed's command (CHECK without DETAILS, as the
   * Python client sends it: conformance/commands.json). With a deny cache it goes through
   * `check` (the cache remembers refusals by their retry_after). During an outage: [failOpen, 0].
   */
  async isAllowed(id: string, limit = 100, windowSeconds = 60, options: { now?: number } = {}): Promise<[boolean, number]> {
    if (this.denyCache !== undefined) {
      const r = await this.check(id, limit, windowSeconds, options);
      return [r.allowed, r.count];
    }
    const args = [num('limit', limit), num('window', windowSeconds)];
    if (options.now !== undefined) args.push(num('now', options.now));
    const reply = await this.guarded(this.key(id), 'check', args, 'peek', args);
    if (reply === WITHOUT) return [this.circuit.failOpen, 0];
    const [allowed, count] = ints(reply, 2) as [number, number];
    return [allowed === 1, count];
  }

  /** Counts the request (weight `cost`) if it is allowed. */
  check(id: string, limit: number, window: number, options: CallOptions = {}): Promise<RateLimitResult> {
    return this.one('check', id, limit, window, options);
  }

  /** What `check` would answer, changing nothing (read-only: runs on replicas). */
  peek(id: string, limit: number, window: number, options: CallOptions = {}): Promise<RateLimitResult> {
    return this.one('peek', id, limit, window, options);
  }

  /** Gives back what a `check` with these arguments counted; answers what `peek` answers after. Not idempotent. */
  refund(id: string, limit: number, window: number, options: CallOptions = {}): Promise<RateLimitResult> {
    return this.one('refund', id, limit, window, options);
  }

  /**
   * `check`, and while refused, sleep exactly its retryAfter (never past `timeoutMs` from
   * now) and check again. Resolves to the last result: allowed, or refused at the timeout,
   * or at once when it can never pass (cost > limit) or Redis is down with fail-closed. Not
   * a fair queue: concurrent waiters race at each retry.
   */
  async wait(id: string, limit: number, window: number, options: WaitOptions): Promise<RateLimitResult> {
    const { timeoutMs, cost, ms } = options;
    if (typeof timeoutMs !== 'number' || !(timeoutMs >= 0)) throw new RangeError(`timeoutMs must be a number >= 0, got ${timeoutMs}`);
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      const result = await this.check(id, limit, window, { cost, ms });
      const pause = pauseBeforeRetry(result, deadline - performance.now());
      if (pause === undefined) return result;
      await new Promise((resolve) => setTimeout(resolve, pause));
    }
  }

  /** Several limits in one command, all or nothing. */
  checkLimits(id: string, limits: LimitsSpec, options: CallOptions = {}): Promise<MultiLimitResult> {
    return this.many('check', id, ...toLimits(limits, options));
  }

  peekLimits(id: string, limits: LimitsSpec, options: CallOptions = {}): Promise<MultiLimitResult> {
    return this.many('peek', id, ...toLimits(limits, options));
  }

  refundLimits(id: string, limits: LimitsSpec, options: CallOptions = {}): Promise<MultiLimitResult> {
    return this.many('refund', id, ...toLimits(limits, options));
  }

  /** Deletes the key: every window's counts (and its deny-cache entries). Outages are thrown (there is nothing to answer). */
  async reset(id: string): Promise<void> {
    const key = this.key(id);
    this.denyCache?.forget(key);
    try {
      await this.via().send(key, ['DEL', key], false);
    } finally {
      this.denyCache?.forget(key);
    }
  }

  /** COUNTS: [previous, current, elapsed] of one window of the key. */
  async counts(id: string, window: number, options: { now?: number; ms?: boolean } = {}): Promise<WindowCounts> {
    const args = [num('window', window)];
    if (options.now !== undefined) args.push(num('now', options.now));
    if (options.ms === true) args.push('MS');
    const key = this.key(id);
    const reply = await this.guarded(key, 'counts', args, 'counts', args);
    if (reply === WITHOUT) return { previous: 0, current: 0, elapsed: 0, degraded: true };
    const [previous, current, elapsed] = ints(reply, 3) as [number, number, number];
    return { previous, current, elapsed, degraded: false };
  }

  /**
   * One limit (check, peek, refund): its arguments from `last` when the previous call had the
   * same limit, window, unit and cost, else made and kept. Resolves to the summary; a bad
   * argument rejects, as from an async function.
   */
  private one(op: Op, id: string, limit: number, window: number, o: CallOptions): Promise<RateLimitResult> {
    try {
      const ms = o.ms === true;
      let one = this.last;
      if (one === undefined || one.limit !== limit || one.window !== window || one.ms !== ms || one.cost !== o.cost
          || o.now !== undefined) {
        const limits = [{ limit, window }];
        const args = limitArgs(limits, o);
        const pairs = [[limit, window] as const];
        const made: OneLimit = { limit, window, ms, cost: o.cost, args, limits, windows: [window], pairs,
          slot: slotOf({ limits: pairs, ms, now: o.now, cost: o.cost ?? 1 }) };
        if (o.now !== undefined) return this.limited(op, id, made, o).then(summaryOf);
        this.last = one = made;
      }
      return this.limited(op, id, one, o).then(summaryOf);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /** Several limits (or one through the *Limits methods): made for this call. */
  private many(op: Op, id: string, limits: Limit[], o: CallOptions): Promise<MultiLimitResult> {
    try {
      const args = limitArgs(limits, o);
      const pairs = limits.map((l) => [l.limit, l.window] as const);
      const call: OneLimit = { limit: 0, window: 0, ms: o.ms === true, cost: o.cost, args, limits,
        windows: limits.map((l) => l.window), pairs, slot: slotOf({ limits: pairs, ms: o.ms === true, now: o.now, cost: o.cost ?? 1 }) };
      return this.limited(op, id, call, o);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  private limited(op: Op, id: string, call: OneLimit, o: CallOptions): Promise<MultiLimitResult> {
    const key = this.key(id);
    const cache = this.denyCache;
    if (cache === undefined) return this.decide(op, key, call, o);
    // A refund clears the key's cached refusals even when this call bypasses the cache.
    if (o.denyCache === false && op !== 'refund') return this.decide(op, key, call, o);
    if (this.circuit.down) {
      // During an outage the cache is emptied and bypassed: the circuit answers as without
      // it, and a server that comes back may have lost its counts.
      cache.clear();
      return this.decide(op, key, call, o);
    }
    if (op !== 'check' && op !== 'refund') return this.decide(op, key, call, o); // PEEK bypasses it
    const spec: DenySpec = {
      key, limits: call.pairs, ms: o.ms === true, now: o.now, cost: o.cost ?? 1, refund: op === 'refund', slot: call.slot,
    };
    const time = this.clustered ? undefined : () => this.command(key, ['TIME'], true);
    return cache.run(spec, () => this.decide(op, key, call, o), time);
  }

  private decide(op: Op, key: string, call: OneLimit, o: CallOptions): Promise<MultiLimitResult> {
    return this.guarded(key, op, call.args, 'peek', call.args).then((reply) => (reply === WITHOUT
      ? MultiLimitResult.unavailable(this.circuit.failOpen, call.limits, o.ms === true)
      : MultiLimitResult.fromReply(reply, call.windows, o.cost ?? 1, o.ms === true)));
  }

  /** The circuit around one call: the reply, or WITHOUT when answered without Redis (an outage). */
  private guarded(key: string, op: Op, args: string[], probeOp: Op, probeArgs: string[]): Promise<unknown> {
    const state = this.circuit.down ? this.adapter.state?.() : undefined;
    const gate = this.circuit.gate(state !== 'reconnecting');
    if (gate === 'skip') return Promise.resolve(WITHOUT);
    if (gate === 'probe') {
      // A PEEK (or COUNTS): a probe queued in the client's offline queue counts nothing when it is finally sent.
      this.probe(state, key, probeOp, probeArgs).then(() => this.circuit.probed(), (err: unknown) => this.circuit.probed(err));
      return Promise.resolve(WITHOUT);
    }
    let sent: Promise<unknown>;
    try {
      sent = this.send(key, op, args);
    } catch (err) {
      sent = Promise.reject(err);
    }
    return sent.then(undefined, (err: unknown) => this.failure(err, key));
  }

  private async failure(err: unknown, key: string): Promise<unknown> {
    if (this.circuit.failed(err)) {
      this.retireBridge(false);
      return WITHOUT;
    }
    // A refusal by ACL becomes MissingPermissionError (permissions.ts); anything else as it is.
    throw await asPermissionError(err, key, (a) => this.command(key, a, true));
  }

  /**
   * Through the client when it is connected. While it waits out its own reconnect backoff
   * (node-redis: up to 2 s plus 200 ms of jitter at its defaults, ioredis: up to 2 s) the
   * probe would wait in its offline queue until it reconnects, however long after the server
   * is back: then it goes through a spare connection of the limiter's own that fails at once.
   * A spare that gets an answer carries the calls until the client is connected again.
   */
  private async probe(state: string | undefined, key: string, op: Op, args: string[]): Promise<void> {
    if (state !== 'reconnecting' || this.adapter.spare === undefined) {
      await this.send(key, op, args);
      return;
    }
    const spare = this.adapter.spare();
    try {
      await this.timed(spare.connected.then(() => this.dispatch(spare, key, op, args)));
    } catch (err) {
      spare.destroy();
      throw err;
    }
    if (this.adapter.state?.() === 'reconnecting') {
      this.retireBridge(true);
      this.bridge = spare;
      // Retired as soon as the client is back, not by the next call: with no more calls
      // (a shutdown) an open spare would keep the process alive.
      this.unwatch = this.adapter.whenSettled?.(() => {
        if (this.bridge === spare) this.retireBridge(true);
      });
    } else {
      spare.close();
    }
  }

  /** The client, or the bridge while the client reconnects. */
  private via(): Sender {
    const bridge = this.bridge;
    if (bridge === undefined) return this.adapter;
    if (bridge.alive() && this.adapter.state?.() === 'reconnecting') return bridge;
    this.retireBridge(true);
    return this.adapter;
  }

  private retireBridge(graceful: boolean): void {
    const bridge = this.bridge;
    if (bridge === undefined) return;
    this.bridge = undefined;
    this.unwatch?.();
    this.unwatch = undefined;
    if (graceful) bridge.close(); else bridge.destroy();
  }

  /**
   * One plain command (name first) through the adapter, routed by `key`, with the limiter's
   * timeout but outside the circuit: for the stores' companion keys (the Nest block key).
   */
  command(key: string, args: readonly string[], readonly = false): Promise<unknown> {
    return this.timed(this.via().send(key, args, readonly));
  }

  private send(key: string, op: Op, args: string[]): Promise<unknown> {
    return this.timed(this.dispatch(this.via(), key, op, args));
  }

  private timed(call: Promise<unknown>): Promise<unknown> {
    return this.timeouts === undefined ? call : this.timeouts.bound(call);
  }

  private dispatch(sender: Sender, key: string, op: Op, args: string[]): Promise<unknown> {
    const primaries = sender === this.adapter ? this.adapterPrimaries : primariesOf(this.adapter, sender, key);
    return this.backendState.call(sender, primaries, op, key, args);
  }
}
