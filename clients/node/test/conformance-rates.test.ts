/**
 * conformance/rates.json replayed: rate strings to [[limit, window_ms], ...], and every error
 * class with the message fragment both clients share (no server: a case with `ms` calls
 * checkLimits on a client that is never connected, and is refused before any I/O).
 * `problem(c)` says how the client disagrees with a case; the self-check mutates vectors and
 * requires the comparison to catch each mutation.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { createClient } from 'redis';
import { SlidingWindowRateLimiter, parseLimits } from '../src';
import { REPO } from './helpers/servers';

interface Case { text: string; ms?: boolean; limits?: number[][]; error?: string; message?: string }
const VECTORS = JSON.parse(readFileSync(join(REPO, 'conformance', 'rates.json'), 'utf8')) as { cases: Case[] };
const ERROR_CLASSES = ['duplicate_window', 'empty', 'month_year', 'ms_option', 'syntax', 'too_many', 'unit', 'zero_multiplier'];

function outcome(c: Case): [number[][] | undefined, string | undefined] {
  try {
    if (c.ms === true) {
      const limiter = new SlidingWindowRateLimiter(createClient({ url: 'redis://127.0.0.1:1' }));
      void limiter.checkLimits('conformance', c.text, { ms: true });
      return [[], undefined];
    }
    return [parseLimits(c.text).map((l) => [l.limit, l.window]), undefined];
  } catch (err) {
    if (!(err instanceof RangeError)) throw err;
    return [undefined, err.message];
  }
}

function problem(c: Case): string | undefined {
  const [limits, message] = outcome(c);
  if (c.limits !== undefined) {
    if (message !== undefined) return `'${c.text}': threw '${message}', expected ${JSON.stringify(c.limits)}`;
    if (JSON.stringify(limits) !== JSON.stringify(c.limits)) return `'${c.text}': ${JSON.stringify(limits)}, expected ${JSON.stringify(c.limits)}`;
    return undefined;
  }
  if (message === undefined) return `'${c.text}': parsed to ${JSON.stringify(limits)}, expected a ${c.error} error`;
  if (!message.includes(c.message!)) return `'${c.text}': '${message}' lacks '${c.message}'`;
  return undefined;
}

test('conformance/rates.json: every vector', () => {
  const problems = VECTORS.cases.map(problem).filter((p) => p !== undefined);
  assert.deepEqual(problems, []);
  assert.ok(VECTORS.cases.length > 30);
});

test('conformance/rates.json: every error class is covered', () => {
  assert.deepEqual([...new Set(VECTORS.cases.flatMap((c) => (c.error === undefined ? [] : [c.error])))].sort(), ERROR_CLASSES);
});

test('conformance/rates.json: a mutated vector fails the comparison', () => {
  const valid = VECTORS.cases.find((c) => c.limits !== undefined && c.limits.length > 1)!;
  const error = VECTORS.cases.find((c) => c.error === 'duplicate_window')!;
  const copy = (): Case => JSON.parse(JSON.stringify(valid)) as Case;
  const mutants: Case[] = [];
  let m = copy(); m.limits![0]![1] = m.limits![0]![1]! / 1000; mutants.push(m);
  m = copy(); m.limits![1]![0] = m.limits![1]![0]! + 1; mutants.push(m);
  m = copy(); m.limits!.pop(); mutants.push(m);
  mutants.push({ ...error, message: error.message!.replace('per minute', 'per 60 s') });
  mutants.push({ text: valid.text, error: 'syntax', message: 'bad rate' });
  mutants.push({ text: error.text, limits: [[10, 60000], [20, 60000]] });
  for (const mutant of mutants) assert.notEqual(problem(mutant), undefined, JSON.stringify(mutant));
});
