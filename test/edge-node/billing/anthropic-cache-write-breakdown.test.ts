// An Anthropic-compatible upstream's `cache_creation` breakdown (5-minute and 1-hour writes) is
// charged a premium only on the cache-creation tokens its total counts: a breakdown beyond the
// total, or given with a total of 0, is held to the total (1-hour writes first), never charged on
// tokens the input does not count or counted twice.
import t from 'tap';
import { cacheWritesOf } from '../../../edge-node/src/providers/anthropic/stream-usage.js';

t.test('a cache_creation breakdown that sums to its total is charged as given', async (t) => {
  t.same(cacheWritesOf(1000, 400, 600, undefined), { fiveMinuteTokens: 400, oneHourTokens: 600 });
  t.same(cacheWritesOf(1000, undefined, undefined, '1h'), { fiveMinuteTokens: 0, oneHourTokens: 1000 }, 'no breakdown: the request\'s longest lifetime');
  t.same(cacheWritesOf(1000, 0, 200, undefined), { fiveMinuteTokens: 800, oneHourTokens: 200 }, 'a breakdown short of the total: the rest at the request\'s lifetime');
});

t.test('a cache_creation breakdown beyond its total is held to the total, 1-hour writes first', async (t) => {
  t.equal(cacheWritesOf(0, undefined, 1000, undefined), undefined, 'a total of 0: nothing written, no premium');
  t.same(cacheWritesOf(1000, 1000, 1000, undefined), { fiveMinuteTokens: 0, oneHourTokens: 1000 }, 'both lifetimes claiming the whole total');
  t.same(cacheWritesOf(1000, 700, 600, undefined), { fiveMinuteTokens: 400, oneHourTokens: 600 });
  t.same(cacheWritesOf(500, 100, 800, '1h'), { fiveMinuteTokens: 0, oneHourTokens: 500 });
});
