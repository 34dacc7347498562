/** Typed results of CHECK / PEEK / REFUND with DETAILS. */

function ceilDiv(n: number, d: number): number {
  return Math.floor((n + d - 1) / d);
}

/** One decision. Times are in the request's unit: seconds, or milliseconds when `ms`. */
export class RateLimitResult {
  constructor(
    /** The request may proceed. */
    readonly allowed: boolean,
    /** The estimate including this request when allowed; the estimate when denied. */
    readonly count: number,
    /** The limit asked for. */
    readonly limit: number,
    /** max(0, limit - count). */
    readonly remaining: number,
    /** Units until the same request is allowed; -1 when allowed now or never possible (cost > limit). */
    readonly retryAfter: number,
    /** Units until the estimate is 0 again (the full limit is available). */
    readonly resetAfter: number,
    /** The window, in the request's unit. */
    readonly window: number,
    /** Windows and times are in milliseconds. */
    readonly ms: boolean,
    /** Redis could not be asked: the counts are placeholders. */
    readonly degraded: boolean = false,
  ) {}

  static fromReply(reply: unknown, window: number, ms: boolean): RateLimitResult {
    const v = atLeast(reply, 6);
    return new RateLimitResult(int(v[0]) === 1, int(v[1]), int(v[2]), int(v[3]), int(v[4]), int(v[5]), window, ms);
  }

  /** The placeholder of a call answered without Redis. */
  static unavailable(allowed: boolean, limit: number, window: number, ms: boolean): RateLimitResult {
    return new RateLimitResult(allowed, 0, limit, allowed ? limit : 0, -1, 0, window, ms, true);
  }

  private toSeconds(units: number): number {
    return this.ms ? ceilDiv(units, 1000) : units;
  }

  /** Whole seconds (rounded up) after which the same request is allowed; null when allowed now or never. */
  get retryAfterSeconds(): number | null {
    return this.retryAfter < 0 ? null : this.toSeconds(this.retryAfter);
  }

  /** Whole seconds (rounded up) until the estimate is 0 again. */
  get resetAfterSeconds(): number {
    return this.toSeconds(this.resetAfter);
  }

  /** The window in whole seconds, at least 1. */
  get windowSeconds(): number {
    return Math.max(1, this.toSeconds(this.window));
  }
}

/** What a call on several limits answers. */
export class MultiLimitResult {
  constructor(
    /** The whole request: allowed; the governing limit's count, limit and remaining;
     * retryAfter until every limit allows it; resetAfter until every window is empty. */
    readonly summary: RateLimitResult,
    /** One result per limit, in call order, as that limit alone reports it. */
    readonly limits: readonly RateLimitResult[],
    /** Index of the limit the summary speaks for. */
    readonly governing: number,
  ) {}

  get allowed(): boolean { return this.summary.allowed; }
  get degraded(): boolean { return this.summary.degraded; }
  get ms(): boolean { return this.summary.ms; }
  get retryAfter(): number { return this.summary.retryAfter; }
  get governingResult(): RateLimitResult { return this.limits[this.governing]!; }

  static fromReply(reply: unknown, windows: readonly number[], cost: number, ms: boolean): MultiLimitResult {
    if (windows.length === 1) {
      const single = RateLimitResult.fromReply(reply, windows[0]!, ms);
      return new MultiLimitResult(single, [single], 0);
    }
    if (!Array.isArray(reply) || reply.length !== 7 || !Array.isArray(reply[6])
        || reply[6].length !== windows.length) {
      throw new TypeError(`expected a 7-element DETAILS reply for ${windows.length} limits, got ${JSON.stringify(reply)}`);
    }
    const head = ints(reply.slice(0, 6), 6);
    const allowed = head[0] === 1;
    const items = (reply[6] as unknown[]).map((item) => ints(item, 6));
    const limits = items.map((v) => {
      // A limit's retry_after is -1 when it alone allows the request, and when it never can.
      const alone = allowed || (v[4] === -1 && cost <= v[1]!);
      return new RateLimitResult(alone, v[2]!, v[1]!, v[3]!, v[4]!, v[5]!, v[0]!, ms);
    });
    // The first limit whose limit, count, remaining and retry_after are the summary's.
    const governing = items.findIndex((v) =>
      v[1] === head[2] && v[2] === head[1] && v[3] === head[3] && v[4] === head[4]);
    if (governing < 0) throw new TypeError(`no limit matches the summary: ${JSON.stringify(reply)}`);
    const summary = new RateLimitResult(allowed, head[1]!, head[2]!, head[3]!, head[4]!, head[5]!,
      limits[governing]!.window, ms);
    return new MultiLimitResult(summary, limits, governing);
  }

  static unavailable(allowed: boolean, limits: readonly Limit[], ms: boolean): MultiLimitResult {
    const each = limits.map((l) => RateLimitResult.unavailable(allowed, l.limit, l.window, ms));
    return new MultiLimitResult(each[0]!, each, 0);
  }
}

/** `limit` requests per sliding `window` (seconds, or ms with `ms: true`). */
export interface Limit {
  readonly limit: number;
  readonly window: number;
}

/** What COUNTS answers for one window of a key. */
export interface WindowCounts {
  readonly previous: number;
  readonly current: number;
  readonly elapsed: number;
  /** Redis could not be asked: zeros. */
  readonly degraded: boolean;
}

function atLeast(reply: unknown, n: number): unknown[] {
  if (!Array.isArray(reply) || reply.length < n) {
    throw new TypeError(`expected an array of ${n} integers, got ${JSON.stringify(reply)}`);
  }
  return reply;
}

function int(x: unknown): number {
  const v = typeof x === 'number' ? x : Number(x);
  if (!Number.isInteger(v)) throw new TypeError(`expected an integer, got ${JSON.stringify(x)}`);
  return v;
}

export function ints(reply: unknown, n: number): number[] {
  const a = atLeast(reply, n);
  const out = new Array<number>(n);
  for (let i = 0; i < n; i++) out[i] = int(a[i]);
  return out;
}
