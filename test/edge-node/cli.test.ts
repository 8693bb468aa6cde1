// The real `zenova-node` process: serve from a config file, answer the openai client, stop cleanly
// on SIGTERM (finishing in-flight streams), and refuse bad command lines and config files (exit 2).
import path from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import OpenAI from 'openai';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { parseJsonLines, startProcess, tsEntry } from '../fixtures/processes.js';
import { CALLER_KEY, UPSTREAM_KEY, testConfig } from './node-harness.js';

const MAIN = 'edge-node/src/main.ts';
const LISTENING = /"msg":"node-edge listening"/;

function runNode(t: Test, args: string[], readyLine?: RegExp, env?: NodeJS.ProcessEnv) {
  const entry = tsEntry(MAIN);
  return startProcess({ name: 'zenova-node', command: entry.command, args: [...entry.args, ...args], t, ...(readyLine ? { readyLine } : {}), ...(env ? { env } : {}) });
}

function listeningUrl(line: string): string {
  const { url } = JSON.parse(line) as { url: string };
  return url;
}

t.test('zenova-node serve answers the openai client and stops on SIGTERM with exit 0', async (t) => {
  const upstream = await startFakeUpstream(t, { chunkDelayMs: 50 });
  const dir = t.testdir({ 'node.json': JSON.stringify(testConfig(upstream.url)) });
  const node = await runNode(t, ['serve', '--config', path.join(dir, 'node.json'), '--listen', '127.0.0.1:0'], LISTENING);
  const url = listeningUrl(await node.waitForLine(LISTENING));
  t.match(url, /^http:\/\/127\.0\.0\.1:\d+$/);
  t.not(url, 'http://127.0.0.1:0', 'the real port is logged');

  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: CALLER_KEY, maxRetries: 0 });
  const { data, response } = await client.chat.completions
    .create({ model: 'echo', messages: [{ role: 'user', content: 'from a child' }] })
    .withResponse();
  t.equal(data.choices[0]?.message.content, '[zenova demo upstream] echo: from a child');
  t.ok(response.headers.get('x-request-id'));

  // A stream in flight when SIGTERM arrives still runs to its end.
  const stream = await client.chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'finish me even while stopping' }], stream: true });
  const pieces: string[] = [];
  let signalled: Promise<number | null> | undefined;
  for await (const chunk of stream) {
    pieces.push(chunk.choices[0]?.delta.content ?? '');
    signalled ??= node.stop('SIGTERM');
  }
  t.equal(pieces.join(''), '[zenova demo upstream] echo: finish me even while stopping', 'the in-flight stream completed');
  t.equal(await signalled, 0, 'exit code 0');
  t.match(node.output(), /node-edge stopped/);
  t.notOk(node.output().includes(UPSTREAM_KEY), 'the upstream key is not in the output');
  t.notOk(node.output().includes(CALLER_KEY), 'the caller key is not in the output');
  const lines = parseJsonLines(node.output());
  t.ok(lines.some((l) => l.msg === 'request finished' && l.stream === true), 'requests are logged as JSON lines');
});

t.test('a stream still running when the stop drain (ZENOVA_NODE_SHUTDOWN_DRAIN_MS) runs out ends with the error event ZN_ERR_NODE_STOPPING, and the node exits 0', async (t) => {
  const upstream = await startFakeUpstream(t, { chunkDelayMs: 5_000 });
  const dir = t.testdir({ 'node.json': JSON.stringify(testConfig(upstream.url)) });
  const node = await runNode(t, ['serve', '--config', path.join(dir, 'node.json'), '--listen', '127.0.0.1:0'], LISTENING, { ZENOVA_NODE_SHUTDOWN_DRAIN_MS: '300' });
  const url = listeningUrl(await node.waitForLine(LISTENING));
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${CALLER_KEY}` },
    body: JSON.stringify({ model: 'echo', stream: true, messages: [{ role: 'user', content: 'a long answer, cut by the stop' }] }),
  });
  t.equal(res.status, 200);
  const reader = res.body!.getReader();
  let text = new TextDecoder().decode((await reader.read()).value);
  const exited = node.stop('SIGTERM', 20_000);
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    text += new TextDecoder().decode(value);
  }
  t.match(text, /"code":"ZN_ERR_NODE_STOPPING"/, 'the stream ends with the error event, not a cut connection');
  t.equal(await exited, 0, 'exit code 0');
  t.match(node.output(), /the shutdown deadline passed: the requests still running are ended/);
});

t.test('a config naming an unknown upstream stops start-up with exit 2, naming the file and the path', async (t) => {
  const bad = testConfig('http://127.0.0.1:9/v1');
  bad.models[0]!.upstream = 'missing';
  const dir = t.testdir({ 'bad.json': JSON.stringify(bad) });
  const file = path.join(dir, 'bad.json');
  const node = await runNode(t, ['serve', '--config', file]);
  const { code } = await node.exited;
  t.equal(code, 2);
  const out = node.output();
  t.match(out, file);
  t.match(out, /models\[0\]\.upstream: unknown upstream "missing"/);
  t.notMatch(out, /^\s+at /m, 'no stack trace');
  t.notMatch(out, LISTENING);
});

t.test('a config without apiKeys lets callers in without a key only on loopback: beyond it, start-up stops with exit 2 saying why', async (t) => {
  const upstream = await startFakeUpstream(t);
  const { apiKeys: _omitted, ...open } = testConfig(upstream.url);
  const dir = t.testdir({ 'open.json': JSON.stringify(open) });
  const file = path.join(dir, 'open.json');
  for (const listen of ['0.0.0.0:0', '[::]:0', '10.1.2.3:7480']) {
    const node = await runNode(t, ['serve', '--config', file, '--listen', listen]);
    t.equal((await node.exited).code, 2, listen);
    t.match(node.output(), new RegExp(`${file}: lists no apiKeys, so every caller would be let in, and --listen \\S+ is reachable from other hosts: add apiKeys .* or listen on loopback`), listen);
    t.notMatch(node.output(), LISTENING);
  }
  const local = await runNode(t, ['serve', '--config', file, '--listen', '127.0.0.1:0'], LISTENING);
  t.match(local.output(), /"msg":"the config lists no apiKeys: callers need no key \(served on loopback only\)"/);
  const url = listeningUrl(local.output().split('\n').find((l) => LISTENING.test(l)) ?? '{}');
  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'anything', maxRetries: 0 });
  t.equal((await client.chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'hi' }] })).object, 'chat.completion');
  t.equal(await local.stop('SIGTERM'), 0);
});

t.test('an unreadable or non-JSON config file stops start-up with exit 2 naming the file', async (t) => {
  const dir = t.testdir({ 'broken.json': '{ "upstreams": [' });
  for (const file of [path.join(dir, 'broken.json'), path.join(dir, 'absent.json')]) {
    const node = await runNode(t, ['serve', '--config', file]);
    t.equal((await node.exited).code, 2);
    t.match(node.output(), file);
    t.match(node.output(), /not valid JSON|cannot read/);
  }
});

t.test('unknown commands and flags print usage to stderr and exit 2', async (t) => {
  for (const args of [['frobnicate'], ['serve', '--config', 'x.json', '--bogus'], ['serve'], ['serve', '--config', 'x.json', '--listen', 'nope'], []]) {
    const node = await runNode(t, args);
    t.equal((await node.exited).code, 2, `exit 2 for ${JSON.stringify(args)}`);
    t.match(node.output(), /Usage: zenova-node/);
  }
});

t.test('--help prints the usage of the CLI and of serve, exit 0', async (t) => {
  const main = await runNode(t, ['--help']);
  t.equal((await main.exited).code, 0);
  t.match(main.output(), /Commands:\n\s+serve/);
  const serve = await runNode(t, ['serve', '--help']);
  t.equal((await serve.exited).code, 0);
  t.match(serve.output(), /--listen HOST:PORT/);
});
