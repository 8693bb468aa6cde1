// The event-by-event output guard of MCP event streams on its own, with a real compiled policy
// (e-mail masked, phone numbers blocked): events split anywhere across chunks, multi-line and
// non-JSON data, the other lines of an event, the bound on one event, and what a block sends.
import t from 'tap';
import type { GuardrailVerdict } from '../../proto/src/index.js';
import { compilePolicy } from '../../edge-node/src/guardrails/compiled-policy.js';
import { applyPolicy } from '../../edge-node/src/guardrails/policy-engine.js';
import type { PipelineContext, TextSlot } from '../../edge-node/src/pipeline/context.js';
import type { Rejection } from '../../edge-node/src/pipeline/stage.js';
import { guardEventStream } from '../../edge-node/src/providers/mcp/mcp-event-guard.js';
import type { EventGuard } from '../../edge-node/src/providers/mcp/mcp-event-guard.js';
import { MemorySessionOwnerStore } from '../../edge-node/src/providers/mcp/session-owner-store.js';
import { SessionOwners } from '../../edge-node/src/providers/mcp/session-owners.js';
import { policy } from './guardrails/guardrail-fixtures.js';

const EMAIL = 'zhang.san@example.com';
const compiled = compilePolicy(policy('p', [{ detector: 'email', action: 'mask', on: 'output' }, { detector: 'phone', action: 'block', on: 'output' }]));

interface Run {
  out: string;
  kept: string[];
  blockedWith: Rejection | undefined;
  verdicts: GuardrailVerdict[];
}

async function run(chunks: Array<string | Uint8Array>, pending: Array<string | number> = [], maxEventChars = 1 << 20, from?: AsyncIterable<Uint8Array>): Promise<Run> {
  const verdicts: GuardrailVerdict[] = [];
  const ctx = { guardrails: verdicts } as unknown as PipelineContext;
  const result: Run = { out: '', kept: [], blockedWith: undefined, verdicts };
  const guard: EventGuard = {
    check: (slots: TextSlot[]) => applyPolicy(ctx, compiled, 'output', slots),
    pending: new Set(pending),
    blocked: (rejection) => void (result.blockedWith = rejection),
    keep: (slots) => void result.kept.push(...slots.map((s) => s.text)),
  };
  const source = from ?? (async function* () {
    for (const c of chunks) yield typeof c === 'string' ? new TextEncoder().encode(c) : c;
  })();
  const decoder = new TextDecoder();
  for await (const bytes of guardEventStream(source, guard, maxEventChars)) result.out += decoder.decode(bytes, { stream: true });
  return result;
}

const message = (id: number, text: string): string => JSON.stringify({ jsonrpc: '2.0', id, result: { content: [{ type: 'text', text }] } });

t.test('an event split across chunks at any byte is checked as one event and masked once', async (t) => {
  const wire = `event: message\nid: 7\ndata: ${message(1, `写给 ${EMAIL} 的信`)}\n\n`;
  const bytes = new TextEncoder().encode(wire);
  const expected = `event: message\nid: 7\ndata: ${message(1, '写给 [EMAIL] 的信')}\n\n`;
  for (let cut = 1; cut < bytes.length; cut += 1) {
    const { out } = await run([bytes.slice(0, cut), bytes.slice(cut)]);
    if (out !== expected) {
      t.equal(out, expected, `split at byte ${cut}`);
      return;
    }
  }
  t.pass('every split point gives the same masked event');
});

t.test('data over several lines and data that is not JSON are checked as one text', async (t) => {
  const pretty = JSON.stringify(JSON.parse(message(2, EMAIL)), null, 1).split('\n').map((l) => `data: ${l}`).join('\n');
  const { out } = await run([`${pretty}\n\ndata: plain ${EMAIL}\ndata: second line\n\n`]);
  t.equal(out, `data: ${message(2, '[EMAIL]')}\n\ndata: plain [EMAIL]\ndata: second line\n\n`);
});

t.test('a block sends none of the blocked event and answers each pending request once with a JSON-RPC error', async (t) => {
  const first = `event: message\ndata: ${message(1, 'fine')}\n\n`;
  const r = await run([first, `event: message\ndata: ${message(2, 'call 13800138000')}\n\n`, `data: ${message(3, 'never read')}\n\n`], [1, 2, 3]);
  t.equal(r.blockedWith?.error.code, 'ZN_ERR_GUARDRAIL_BLOCKED');
  t.notOk(r.out.includes('13800138000'), 'the blocked text is not sent');
  t.notOk(r.out.includes('never read'), 'nothing after the block is sent');
  const answers = r.out.split('\n').filter((l) => l.startsWith('data: ')).map((l) => JSON.parse(l.slice(6)) as { id: number; error?: { code: number; data: { code: string } } });
  t.same(answers.map((a) => a.id), [1, 2, 3], 'the answered call, then one error per call still pending');
  t.match(answers.slice(1), [{ error: { code: -32000, data: { code: 'ZN_ERR_GUARDRAIL_BLOCKED' } } }, { error: { code: -32000 } }]);
  t.same(r.kept, ['text', 'fine', 'content', 'type', 'text'], 'only delivered text is kept for the record');
  t.match(r.verdicts, [{ detector: 'phone', action: 'block', matches: 1 }]);
});

t.test("an event's other lines (a comment, id, event, a field clients ignore) are checked too: masked in place, a masked comment dropped, a block stops the stream", async (t) => {
  const masked = await run([`: debug customer=${EMAIL}\n\n: keep-alive\n\nid: ${EMAIL}\nevent: message\nx-note: ${EMAIL}\nretry: 1000\ndata: ${message(1, 'done')}\n\nid: ${EMAIL}\n\n`]);
  t.equal(masked.out, `: keep-alive\n\nid: [EMAIL]\nevent: message\nx-note: [EMAIL]\nretry: 1000\ndata: ${message(1, 'done')}\n\nid: [EMAIL]\n\n`);
  t.notOk(masked.out.includes(EMAIL));
  const both = await run([`id: ${EMAIL}\ndata: ${message(2, `to ${EMAIL}`)}\nevent: message\n\n`]);
  t.equal(both.out, `id: [EMAIL]\ndata: ${message(2, 'to [EMAIL]')}\nevent: message\n\n`, 'masked data and a masked id, each in its place');
  const blocked = await run([`: call 13800138000\n\n`, `data: ${message(3, 'never read')}\n\n`], [3]);
  t.equal(blocked.blockedWith?.error.code, 'ZN_ERR_GUARDRAIL_BLOCKED', 'a blocked number in a comment blocks');
  t.notOk(blocked.out.includes('13800138000'));
  const idBlocked = await run([`id: 13800138000\ndata: ${message(4, 'fine')}\n\n`], [4]);
  t.equal(idBlocked.blockedWith?.error.code, 'ZN_ERR_GUARDRAIL_BLOCKED', 'and in an id');
  t.notOk(idBlocked.out.includes('13800138000'));
  const clean = `: ping\n\nevent: message\nid: 42\nretry: 3000\ndata: ${message(5, 'fine')}\n\n`;
  t.equal((await run([clean])).out, clean, 'lines nothing matches pass byte for byte');
  // A field's name is read by a raw client as much as its value; `retry:` is let by only with digits.
  const named = await run([`${EMAIL}: x\nretry: ${EMAIL}\ndata: ${message(6, 'fine')}\n\n`]);
  t.equal(named.out, `[EMAIL]: x\nretry: [EMAIL]\ndata: ${message(6, 'fine')}\n\n`, 'a field name and a retry line that is not digits are checked');
  const namedBlock = await run([`tel-13800138000: 1\ndata: ${message(7, 'fine')}\n\n`], [7]);
  t.equal(namedBlock.blockedWith?.error.code, 'ZN_ERR_GUARDRAIL_BLOCKED', 'a blocked number in a field name blocks');
});

t.test('an event longer than the bound fails the stream instead of passing unchecked', async (t) => {
  await t.rejects(run([`data: ${'x'.repeat(200)}`], [], 100), { code: 'ZN_ERR_UPSTREAM_ERROR' });
});

t.test('JSON data that is not a JSON-RPC message has every string in it checked, and is re-serialised when masked', async (t) => {
  const r = await run([`data: "${EMAIL}"\n\ndata: ["${EMAIL}", "x"]\n\ndata: [{"jsonrpc":"2.0","method":"m"}, "${EMAIL}"]\n\ndata: 1\n\n`]);
  t.equal(r.out, 'data: "[EMAIL]"\n\ndata: ["[EMAIL]","x"]\n\ndata: [{"jsonrpc":"2.0","method":"m"},"[EMAIL]"]\n\ndata: 1\n\n');
  const blocked = await run(['data: 13800138000\n\n']);
  t.equal(blocked.blockedWith?.error.code, 'ZN_ERR_GUARDRAIL_BLOCKED', 'a bare number is checked too');
  t.notOk(blocked.out.includes('13800138000'));
});

t.test('a large event arriving in many small CRLF chunks is guarded in time linear in its size', async (t) => {
  // 4 MiB in 1 KiB chunks: rescanning (and re-normalising) everything received on every chunk
  // takes minutes here; linear work takes well under a second, so the bound is ~50x that.
  const line = `data: ${'QUJD'.repeat(18)}\r\n`;
  const wire = `event: message\r\n${line.repeat(Math.ceil((4 << 20) / line.length))}data: ${EMAIL}\r\n\r\n`;
  const bytes = new TextEncoder().encode(wire);
  const chunks: Uint8Array[] = [];
  for (let at = 0; at < bytes.length; at += 1024) chunks.push(bytes.subarray(at, at + 1024));
  const deadline = Date.now() + 30_000;
  const source = (async function* () {
    for (const chunk of chunks) {
      if (Date.now() > deadline) throw new Error('the guard fell behind: its work grows faster than the stream');
      yield chunk;
    }
  })();
  const r = await run([], [], 8 << 20, source);
  t.ok(Date.now() <= deadline, 'guarded within the bound');
  t.ok(r.out.startsWith('event: message\ndata: QUJD'), 'line ends normalised');
  t.ok(r.out.endsWith('data: [EMAIL]\n\n'), 'the whole event was checked as one and masked');
  t.equal(r.out.length, wire.replaceAll('\r\n', '\n').length - EMAIL.length + '[EMAIL]'.length);
});

t.test('the session table admits a session only to the key it is bound to, refuses unknown ids to every key and stays bounded', async (t) => {
  const owners = new SessionOwners(new MemorySessionOwnerStore({ max: 2 }));
  owners.bind('tools', 's1', 'key-a');
  t.equal(owners.admit('tools', 's1', 'key-a'), 'admitted');
  t.equal(owners.admit('tools', 's1', 'key-b'), 'refused');
  t.equal(owners.admit('other', 's1', 'key-a'), 'refused', 'sessions are per tool server: unknown there');
  t.equal(owners.size, 1, 'admitting an unknown session binds nothing');
  owners.bind('other', 's1', 'key-b');
  t.equal(owners.admit('tools', 's1', 'key-a'), 'admitted', 'use makes s1 the most recent binding');
  owners.bind('tools', 's2', 'key-a');
  t.equal(owners.size, 2, 'the least recently used binding went');
  t.equal(owners.admit('tools', 's1', 'key-b'), 'refused', 'the session in use kept its owner');
  t.equal(owners.admit('tools', 's1', 'key-a'), 'admitted');
  t.equal(owners.admit('other', 's1', 'key-b'), 'refused', 'the idle one was dropped: refused, to its owner too');
  owners.forget('tools', 's1');
  t.equal(owners.admit('tools', 's1', 'key-a'), 'refused', 'a forgotten session is refused');
  owners.bind('tools', 'x'.repeat(1024), 'key-a');
  t.equal(owners.admit('tools', 'x'.repeat(1024), 'key-b'), 'refused', 'long ids are bound too (stored as a fixed-size hash)');
  t.equal(owners.admit('tools', 'x'.repeat(1024), 'key-a'), 'admitted');
});
