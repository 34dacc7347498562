/** parseLimits beyond conformance/rates.json (conformance-rates.test.ts replays the accepted forms and every error). */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseLimits } from '../src';
import { describeMs } from '../src/rates';

test('parseLimits: windows in ms', () => {
  assert.deepEqual(parseLimits('10/second;1000/hour'), [{ limit: 10, window: 1000 }, { limit: 1000, window: 3_600_000 }]);
});

test('parseLimits: a RangeError for bad text, a TypeError for no string', () => {
  assert.throws(() => parseLimits('lots'), RangeError);
  assert.throws(() => parseLimits(10 as unknown as string), TypeError);
});

test('describeMs: windows in words', () => {
  assert.deepEqual(parseLimits('10/second;100/5 minutes;2/7200 seconds').map((r) => describeMs(r.limit, r.window)),
    ['10 per second', '100 per 5 minutes', '2 per 2 hours']);
  assert.equal(describeMs(3, 1500), '3 per 1500 ms');
});
