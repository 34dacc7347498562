/** parseLimits: what it accepts, and the error messages naming the bad part (no server). */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseLimits } from '../src';

test('parseLimits: the accepted forms', () => {
  assert.deepEqual(parseLimits('10/second;1000/hour'), [{ limit: 10, window: 1 }, { limit: 1000, window: 3600 }]);
  assert.deepEqual(parseLimits('100 per 5 minutes, 3/day | 7/minute'),
    [{ limit: 100, window: 300 }, { limit: 3, window: 86400 }, { limit: 7, window: 60 }]);
});

test('parseLimits: each bad input throws a RangeError naming its bad part', () => {
  const cases: Array<[string, RegExp]> = [
    ['', /^RangeError: no rate in '':/],
    ['10/month', /^RangeError: bad rate '10\/month' in '10\/month': 'month' windows vary in length: use days/],
    ['10/fortnight', /unknown unit 'fortnight' \(second, minute, hour or day\)/],
    ['5/year;1/second', /bad rate '5\/year' in '5\/year;1\/second'/],
    ['ten/second', /bad rate 'ten\/second'/],
    ['1/second;2/1 second', /^RangeError: two rates with the same window in '1\/second;2\/1 second':/],
    ['1/0 seconds', /bad rate '1\/0 seconds' in '1\/0 seconds': the window must be >= 1/],
    [Array.from({ length: 9 }, (_, i) => `1/${i + 1} seconds`).join(';'), /^RangeError: 9 rates in '.*': at most 8 per policy/],
  ];
  for (const [text, message] of cases) {
    assert.throws(() => parseLimits(text), (err: unknown) => {
      assert.ok(err instanceof RangeError, `${text}: ${String(err)}`);
      assert.match(String(err), message, text);
      return true;
    });
  }
});
