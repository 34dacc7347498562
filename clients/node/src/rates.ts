/**
 * Rate strings as limits, slowapi and flask-limiter users write them: "10/second;1000/hour".
 *
 * Windows are in MILLISECONDS, and a call given a rate string sends MS: a window of a few
 * units judged in whole units hardly slides (a 1-second window at 1-second resolution counts
 * the previous second in full), in milliseconds it does. A rate string carries its own unit,
 * so a call given one together with `ms: true` is an error. The error messages are the
 * Python client's, word for word (conformance/rates.json holds both clients to it).
 */
import type { Limit } from './result';

const UNITS_MS: Record<string, number> = { second: 1000, minute: 60_000, hour: 3_600_000, day: 86_400_000 };
/** The module's limit per call. */
export const MAX_LIMITS = 8;
const HINT = 'write e.g. "10/second", "1000 per hour" or "100/5 minutes"';
const RATE = /^(\d+)\s*(?:\/|per\b)\s*(?:(\d+)\s*)?([a-z]+)$/i;
/** The error of a call given a rate string and `ms: true`. */
export const MS_WITH_RATE_STRING = 'a rate string carries its own unit (ms): give (limit, window) pairs with ms';

/** `10 per second`, `100 per 5 minutes`, `3 per 1500 ms`: a window in ms in words. */
export function describeMs(limit: number, windowMs: number): string {
  for (const [unit, size] of Object.entries(UNITS_MS).sort((a, b) => b[1] - a[1])) {
    if (windowMs % size === 0) {
      const n = windowMs / size;
      return n === 1 ? `${limit} per ${unit}` : `${limit} per ${n} ${unit}s`;
    }
  }
  return `${limit} per ${windowMs} ms`;
}

function unitMs(word: string, item: string, text: string): number {
  let name = word.toLowerCase();
  if (name.endsWith('s') && name.slice(0, -1) in UNITS_MS) name = name.slice(0, -1);
  const size = Object.hasOwn(UNITS_MS, name) ? UNITS_MS[name] : undefined;
  if (size !== undefined) return size;
  const why = ['month', 'year'].includes(name.replace(/s+$/, ''))
    ? `'${word}' windows vary in length: use days (e.g. 30 days)`
    : `unknown unit '${word}' (second, minute, hour or day)`;
  throw new RangeError(`bad rate '${item}' in '${text}': ${why}`);
}

/** The rates in `text`, in order, windows in ms. Throws a RangeError naming the bad part. */
export function parseLimits(text: string): Limit[] {
  if (typeof text !== 'string') throw new TypeError(`rate limits must be a string, got ${String(text)}`);
  const items = text.split(/[;,|]/).map((s) => s.trim()).filter((s) => s !== '');
  if (items.length === 0) throw new RangeError(`no rate in '${text}': ${HINT}`);
  const rates = items.map((item) => {
    const m = RATE.exec(item);
    if (m === null) throw new RangeError(`bad rate '${item}' in '${text}': ${HINT}`);
    const n = m[2] === undefined ? 1 : Number(m[2]);
    if (n < 1) throw new RangeError(`bad rate '${item}' in '${text}': the window must be >= 1`);
    return { limit: Number(m[1]), window: n * unitMs(m[3]!, item, text) };
  });
  const seen = new Map<number, Limit>();
  for (const rate of rates) {
    const before = seen.get(rate.window);
    if (before !== undefined) {
      throw new RangeError(`two rates with the same window in '${text}': ${describeMs(before.limit, before.window)} and `
        + `${describeMs(rate.limit, rate.window)}; keep one (the smaller limit is the one that applies)`);
    }
    seen.set(rate.window, rate);
  }
  if (rates.length > MAX_LIMITS) {
    throw new RangeError(`${rates.length} rates in '${text}': at most ${MAX_LIMITS} per policy`);
  }
  return rates;
}
