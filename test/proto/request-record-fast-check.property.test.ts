// The control plane takes a record on the hand-written check (isPlainValidRecord) without the zod
// pass. That is only sound if the check never says yes where the schema says no, and only useful
// if it says yes to the records nodes write. Held here on valid records and on one-field mutations
// of them (wrong types, bounds ±1, unknown and missing keys, odd JSON values), as JSON.parse
// would hand them over: the two answer alike, and a yes returns the value as the schema would.
import fc from 'fast-check';
import t from 'tap';
import { MAX_RECORD_UNIX_MS, isPlainValidRecord, requestRecordSchema } from '../../proto/src/index.js';
import type { RequestRecord } from '../../proto/src/index.js';
import { record } from '../edge-node/spool/spool-helpers.js';

const text = (n: number): string => 'x'.repeat(n);

/** Values a mutation may put anywhere: every JSON type, and the schema's bounds on both sides. */
const oddValue = fc.oneof(
  fc.jsonValue({ maxDepth: 2 }),
  fc.constantFrom<unknown>(
    null, true, false, '', 'ok', text(1), text(32), text(33), text(64), text(65), text(128), text(129), text(256), text(257),
    -1, 0, -0, 0.5, 1, 99, 100, 599, 600, 1e308, Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER + 1,
    MAX_RECORD_UNIX_MS, MAX_RECORD_UNIX_MS + 1, [], {}, [1], { a: 1 },
    'model', 'tools', 'chat.completions', 'mcp', 'interrupted', 'timeout', 'mask', 'output',
  ),
);

const attempt = fc.record({
  upstream: fc.string({ minLength: 1, maxLength: 128 }),
  model: fc.string({ minLength: 1, maxLength: 256 }),
  outcome: fc.constantFrom('ok', 'connect', 'timeout', 'status', 'aborted', 'error'),
  httpStatus: fc.oneof(fc.constant(null), fc.integer({ min: 100, max: 599 })),
  durationMs: fc.double({ min: 0, max: 1e6, noNaN: true }),
});
const verdict = fc.record({
  policyId: fc.string({ minLength: 1, maxLength: 128 }),
  rule: fc.nat(),
  detector: fc.string({ minLength: 1, maxLength: 32 }),
  action: fc.constantFrom('block', 'mask', 'flag'),
  on: fc.constantFrom('input', 'output'),
  matches: fc.nat(),
});

/** Records the schema accepts, with the optional and nullable fields in all their forms. */
const validRecord: fc.Arbitrary<RequestRecord> = fc
  .record({
    id: fc.string({ minLength: 1, maxLength: 128 }),
    clientRequestId: fc.option(fc.string({ minLength: 1, maxLength: 128 }), { nil: undefined }),
    api: fc.constantFrom('chat.completions', 'embeddings', 'models', 'messages', 'mcp'),
    status: fc.constantFrom('ok', 'rejected', 'failed', 'aborted', 'interrupted'),
    keyId: fc.option(fc.string({ minLength: 1, maxLength: 128 }), { nil: null }),
    model: fc.option(fc.string({ maxLength: 256 }), { nil: null }),
    httpStatus: fc.integer({ min: 0, max: 599 }),
    receivedAt: fc.integer({ min: 0, max: MAX_RECORD_UNIX_MS }),
    stagesUs: fc.dictionary(fc.string({ maxLength: 32 }).filter((k) => k !== '__proto__'), fc.double({ min: 0, max: 1e9, noNaN: true }), { maxKeys: 12 }),
    attempts: fc.array(attempt, { maxLength: 4 }),
    guardrails: fc.array(verdict, { maxLength: 4 }),
    bodies: fc.option(fc.record({ request: fc.option(fc.string(), { nil: null }), response: fc.option(fc.string(), { nil: null }), truncated: fc.boolean() }), { nil: null }),
    configVersion: fc.option(fc.nat(), { nil: null }),
  })
  .map((f) => {
    const r = record(f.id, {
      api: f.api, status: f.status, keyId: f.keyId, model: f.model, httpStatus: f.httpStatus, receivedAt: f.receivedAt, finishedAt: f.receivedAt,
      attempts: f.attempts, guardrails: f.guardrails, bodies: f.bodies, configVersion: f.configVersion,
      timings: { totalMs: 5, upstreamFirstByteMs: null, upstreamMs: 3.25, stagesUs: f.stagesUs },
    });
    return f.clientRequestId === undefined ? r : { ...r, clientRequestId: f.clientRequestId };
  });

/** Every place a value sits in a record (nested objects and the first array item included). */
function paths(value: unknown, prefix: string[] = []): string[][] {
  if (value === null || typeof value !== 'object') return [prefix];
  const entries = Array.isArray(value) ? value.slice(0, 1).map((v, i) => [String(i), v] as const) : Object.entries(value);
  return [prefix, ...entries.flatMap(([k, v]) => paths(v, [...prefix, k]))];
}

type Mutation = { kind: 'set'; value: unknown } | { kind: 'delete' } | { kind: 'add'; key: string; value: unknown };
const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  fc.record({ kind: fc.constant('set' as const), value: oddValue }),
  fc.constant({ kind: 'delete' as const }),
  fc.record({ kind: fc.constant('add' as const), key: fc.constantFrom('extra', 'clientRequestId', '__proto__', 'constructor', 'x'.repeat(33)), value: oddValue }),
);

/** The record as JSON.parse would hand it over after the mutation: a fresh value, own keys only. */
function mutate(r: RequestRecord, pathIndex: number, m: Mutation): unknown {
  const all = paths(r);
  const at = all[pathIndex % all.length]!;
  const copy = JSON.parse(JSON.stringify(r)) as Record<string, unknown>;
  let parent: Record<string, unknown> = copy;
  for (const key of at.slice(0, -1)) parent = parent[key] as Record<string, unknown>;
  const last = at.at(-1);
  const target = last === undefined ? copy : (parent[last]);
  if (m.kind === 'add') {
    if (target === null || typeof target !== 'object') return copy;
    // Through JSON text, so `__proto__` becomes an own key as it does in JSON.parse.
    const json = JSON.stringify(target);
    const withKey = Array.isArray(target) ? `[${JSON.stringify(m.value)}${json.length > 2 ? ',' : ''}${json.slice(1)}` : `{${JSON.stringify(m.key)}:${JSON.stringify(m.value)}${json.length > 2 ? ',' : ''}${json.slice(1)}`;
    const replaced = JSON.parse(withKey) as unknown;
    if (last === undefined) return replaced;
    parent[last] = replaced;
    return copy;
  }
  if (last === undefined) return m.kind === 'set' ? JSON.parse(JSON.stringify(m.value)) : undefined;
  if (m.kind === 'delete') {
    if (Array.isArray(parent)) parent.splice(Number(last), 1);
    else delete parent[last];
  } else {
    parent[last] = JSON.parse(JSON.stringify(m.value)) as unknown;
  }
  return copy;
}

function agrees(value: unknown): boolean {
  const fast = isPlainValidRecord(value);
  const parsed = requestRecordSchema.safeParse(value);
  // A yes must be a value the schema takes, and takes as it is.
  if (fast) return parsed.success && JSON.stringify(Object.entries(parsed.data).sort()) === JSON.stringify(Object.entries(value as object).sort());
  // A no must be one the schema refuses too, or the check is of no use: `__proto__` keys aside,
  // which it leaves to the schema on purpose.
  return !parsed.success || JSON.stringify(Object.keys(value as object)).includes('__proto__') || JSON.stringify(value).includes('"__proto__"');
}

t.test('the check accepts every record the schema accepts, as it is', (t) => {
  fc.assert(fc.property(validRecord, (r) => isPlainValidRecord(JSON.parse(JSON.stringify(r))) && agrees(JSON.parse(JSON.stringify(r)))), { numRuns: 500 });
  t.pass();
  t.end();
});

t.test('on a record with one field changed, removed or added, the check and the schema answer alike', (t) => {
  fc.assert(
    fc.property(validRecord, fc.nat(), mutation, (r, pathIndex, m) => agrees(mutate(r, pathIndex, m))),
    { numRuns: 4000 },
  );
  t.pass();
  t.end();
});

t.test('every field of a full record set to each boundary value, removed, or joined by an unknown key: the check and the schema answer alike', (t) => {
  const full: RequestRecord = {
    ...record('req-full', {
      attempts: [{ upstream: 'u', model: 'm', outcome: 'status', httpStatus: 503, durationMs: 1.5 }],
      guardrails: [{ policyId: 'p', rule: 0, detector: 'email', action: 'mask', on: 'output', matches: 2 }],
      timings: { totalMs: 5, upstreamFirstByteMs: 1, upstreamMs: 3, stagesUs: { identify: 9, [text(32)]: 1 } },
    }),
    clientRequestId: 'client-1',
  };
  const bounds = [
    null, true, '', text(1), text(32), text(33), text(64), text(65), text(128), text(129), text(256), text(257),
    -1, -0, 0, 0.5, 1, 99, 100, 599, 600, 1e308, Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER + 1, MAX_RECORD_UNIX_MS, MAX_RECORD_UNIX_MS + 1,
    [], {}, 'model', 'tools', 'mcp', 'interrupted', 'timeout', 'mask', 'output', 'input', 'flag',
  ];
  let disagreements = 0;
  let checked = 0;
  const all = paths(full);
  for (let i = 0; i < all.length; i++) {
    const cases: Mutation[] = [{ kind: 'delete' }, ...bounds.map((value): Mutation => ({ kind: 'set', value }))];
    for (const key of ['extra', 'clientRequestId', '__proto__', text(32), text(33)]) for (const value of [1, 'x', null]) cases.push({ kind: 'add', key, value });
    for (const m of cases) {
      checked += 1;
      const value = mutate(full, i, m);
      if (!agrees(value)) {
        disagreements += 1;
        if (disagreements <= 5) t.fail(`disagree at ${all[i]!.join('.') || '(record)'}: ${JSON.stringify(m).slice(0, 120)}`);
      }
    }
  }
  t.equal(disagreements, 0, `${checked} mutations checked`);
  t.end();
});

t.test('values no JSON text gives are left to the schema or refused like it', (t) => {
  const base = record('req-1');
  for (const odd of [Number.NaN, Number.POSITIVE_INFINITY, undefined, () => 1, new Date(0), Symbol('s')]) {
    t.equal(isPlainValidRecord({ ...base, httpStatus: odd }), false, String(odd));
    t.equal(isPlainValidRecord({ ...base, timings: { ...base.timings, totalMs: odd } }), false, String(odd));
  }
  t.equal(isPlainValidRecord(JSON.parse(`{"__proto__":{"x":1},${JSON.stringify(base).slice(1)}`)), false, 'a __proto__ key goes to the schema');
  t.equal(isPlainValidRecord([base]), false);
  t.equal(isPlainValidRecord(null), false);
  t.equal(isPlainValidRecord(JSON.parse(JSON.stringify(base))), true, 'the helper record itself passes');
  t.end();
});
