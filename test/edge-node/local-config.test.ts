// The local config file: what it accepts, and errors that name the file and the offending path.
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import t from 'tap';
import { DEFAULT_MAX_BODY_BYTES, LocalConfigError, loadLocalConfig, maxBodyBytes, parseLocalConfig } from '../../edge-node/src/config/local-config.js';

const valid = {
  node: { name: 'edge-1' },
  upstreams: [{ name: 'openai', kind: 'openai-compatible', baseUrl: 'https://api.example.com/v1', apiKey: 'sk-x', timeoutMs: 5000 }],
  models: [{ id: 'gpt', upstream: 'openai', upstreamModel: 'gpt-4o-mini' }],
  apiKeys: [{ id: 'k1', sha256: 'a'.repeat(64), name: 'first' }],
  limits: { maxBodyBytes: 2048 },
};

function problemOf(value: unknown): string {
  try {
    parseLocalConfig(value, 'cfg.json');
  } catch (err) {
    if (err instanceof LocalConfigError) return err.message;
    throw err;
  }
  throw new Error('expected the config to be refused');
}

t.test('a complete config is accepted as written', async (t) => {
  const config = parseLocalConfig(valid);
  t.same(config, valid);
  t.equal(maxBodyBytes(config), 2048);
  t.equal(maxBodyBytes(parseLocalConfig({ ...valid, limits: undefined })), DEFAULT_MAX_BODY_BYTES, 'the body limit defaults to 4 MiB');
});

t.test('an upstream key pasted with a trailing newline is taken without it (it is sent as a header value)', async (t) => {
  const config = parseLocalConfig({ ...valid, upstreams: [{ ...valid.upstreams[0], apiKey: 'sk-x\n' }] });
  t.equal(config.upstreams[0]?.apiKey, 'sk-x');
});

t.test('each kind of mistake is refused naming its path', async (t) => {
  const cases: Array<[string, unknown, RegExp]> = [
    ['a model of an unknown upstream', { ...valid, models: [{ id: 'gpt', upstream: 'nope', upstreamModel: 'm' }] }, /models\[0\]\.upstream: unknown upstream "nope"/],
    ['two upstreams of one name', { ...valid, upstreams: [valid.upstreams[0], valid.upstreams[0]] }, /upstreams\[1\]\.name: duplicate upstream name "openai"/],
    ['two models of one alias', { ...valid, models: [valid.models[0], valid.models[0]] }, /models\[1\]\.id: duplicate model id "gpt"/],
    ['two keys of one hash', { ...valid, apiKeys: [valid.apiKeys[0], { id: 'k2', sha256: 'A'.repeat(64) }] }, /apiKeys\[1\]\.sha256: duplicate API key hash/],
    ['a non-http base URL', { ...valid, upstreams: [{ ...valid.upstreams[0], baseUrl: 'ftp://x/v1' }] }, /upstreams\[0\]\.baseUrl: must be an http/],
    ['credentials in the base URL', { ...valid, upstreams: [{ ...valid.upstreams[0], baseUrl: 'https://u:p@x/v1' }] }, /upstreams\[0\]\.baseUrl: must not carry credentials/],
    ['an unknown upstream kind', { ...valid, upstreams: [{ ...valid.upstreams[0], kind: 'anthropic' }] }, /upstreams\[0\]\.kind/],
    ['a misspelt field', { ...valid, upstreams: [{ ...valid.upstreams[0], timeout: 5 }] }, /upstreams\[0\]: Unrecognized key: "timeout"/],
    ['a key hash that is not SHA-256 hex', { ...valid, apiKeys: [{ id: 'k', sha256: 'abc' }] }, /apiKeys\[0\]\.sha256: must be 64 hex/],
    ['no upstreams', { ...valid, upstreams: [], models: [] }, /upstreams: /],
    ['a negative timeout', { ...valid, upstreams: [{ ...valid.upstreams[0], timeoutMs: -1 }] }, /upstreams\[0\]\.timeoutMs/],
    ['an upstream key with a space inside', { ...valid, upstreams: [{ ...valid.upstreams[0], apiKey: 'sk-a b' }] }, /upstreams\[0\]\.apiKey: must be printable ASCII/],
    ['an upstream key of blanks', { ...valid, upstreams: [{ ...valid.upstreams[0], apiKey: ' \n' }] }, /upstreams\[0\]\.apiKey/],
    ['not an object', 'hello', /\(root\)/],
  ];
  for (const [what, value, expected] of cases) t.match(problemOf(value), expected, what);
  t.match(problemOf({ ...valid, models: [{ id: 'gpt', upstream: 'nope', upstreamModel: 'm' }] }), /^cfg\.json: /, 'the source is named first');
});

t.test('loading a file names the file when it is missing, not JSON, or wrong', async (t) => {
  const dir = t.testdir({
    'ok.json': JSON.stringify(valid),
    'broken.json': '{"upstreams": [',
    'wrong.json': JSON.stringify({ ...valid, models: [{ id: 'gpt', upstream: 'x', upstreamModel: 'm' }] }),
  });
  t.same(await loadLocalConfig(path.join(dir, 'ok.json')), valid);
  await t.rejects(loadLocalConfig(path.join(dir, 'absent.json')), { name: 'LocalConfigError', message: /absent\.json: cannot read the file \(ENOENT\)/ });
  await t.rejects(loadLocalConfig(path.join(dir, 'broken.json')), { message: /broken\.json: not valid JSON/ });
  await t.rejects(loadLocalConfig(path.join(dir, 'wrong.json')), { message: /wrong\.json: models\[0\]\.upstream/ });
});

t.test('loading a config that is a device, a FIFO or a directory refuses it unread, and a file past the limit without reading on', async (t) => {
  const dir = t.testdir({ 'big.json': ' '.repeat(1024 * 1024 + 1) });
  const fifo = path.join(dir, 'config.fifo');
  execFileSync('mkfifo', [fifo]);
  for (const file of ['/dev/zero', fifo, dir]) {
    await t.rejects(loadLocalConfig(file), { name: 'LocalConfigError', message: /not a regular file/ }, file);
  }
  await t.rejects(loadLocalConfig(path.join(dir, 'big.json')), { message: /big\.json: larger than 1048576 bytes/ });
});
