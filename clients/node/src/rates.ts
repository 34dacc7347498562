/** Rate strings as limits, slowapi and flask-limiter users write them: "10/second;1000/hour". */
import type { Limit } from './result';

const UNITS: Record<string, number> = { second: 1, minute: 60, hour: 3600, day: 86400 };
/** The module's limit per call. */
export const MAX_LIMITS = 8;
const HINT = 'write e.g. "10/second", "1000 per hour" or "100/5 minutes"';
const RATE = /^(\d+)\s*(?:\/|per\b)\s*(?:(\d+)\s*)?([a-z]+)$/i;

function show(rate: Limit): string {
  for (const [unit, seconds] of Object.entries(UNITS).sort((a, b) => b[1] - a[1])) {
    if (rate.window % seconds === 0) {
      const n = rate.window / seconds;
      return n === 1 ? `${rate.limit} per ${unit}` : `${rate.limit} per ${n} ${unit}s`;
    }
  }
  return `${rate.limit} per ${rate.window} seconds`;
}

function unitSeconds(word: string, item: string, text: string): number {
  let name = word.toLowerCase();
  if (name.endsWith('s') && name.slice(0, -1) in UNITS) name = name.slice(0, -1);
  const seconds = UNITS[name];
  if (seconds !== undefined) return seconds;
  const why = ['month', 'year'].includes(name.replace(/s$/, ''))
    ? `'${word}' windows vary in length: use days (e.g. 30 days)`
    : `unknown unit '${word}' (second, minute, hour or day)`;
  throw new RangeError(`bad rate '${item}' in '${text}': ${why}`);
}

/** The rates in `text`, in order, windows in seconds. Throws a RangeError naming the bad part. */
export function parseLimits(text: string): Limit[] {
  const items = text.split(/[;,|]/).map((s) => s.trim()).filter((s) => s !== '');
  if (items.length === 0) throw new RangeError(`no rate in '${text}': ${HINT}`);
  const rates = items.map((item) => {
    const m = RATE.exec(item);
    if (m === null) throw new RangeError(`bad rate '${item}' in '${text}': ${HINT}`);
    const n = m[2] === undefined ? 1 : Number(m[2]);
    if (n < 1) throw new RangeError(`bad rate '${item}' in '${text}': the window must be >= 1`);
    return { limit: Number(m[1]), window: n * unitSeconds(m[3]!, item, text) };
  });
  const seen = new Map<number, Limit>();
  for (const rate of rates) {
    const before = seen.get(rate.window);
    if (before !== undefined) {
      throw new RangeError(`two rates with the same window in '${text}': ${show(before)} and `
        + `${show(rate)}; keep one (the smaller limit is the one that applies)`);
    }
    seen.set(rate.window, rate);
  }
  if (rates.length > MAX_LIMITS) {
    throw new RangeError(`${rates.length} rates in '${text}': at most ${MAX_LIMITS} per policy`);
  }
  return rates;
}
