// `zenova gateway-node create | install-command | reenroll-command | upgrade-command --ca-out F`
// against a real control plane, when something is at F already: a file holding anything but this
// CA is never replaced (refused before any API call when it is not a PEM certificate file, kept and
// reported after it when it holds other certificates), and a rerun with the same F succeeds.
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { createTestCa } from '../fixtures/tls.js';
import { ADMIN_TOKEN, printedCommand, startControlPlane, tempDir, zenova } from './gateway-node-harness.js';

const CALLBACK = 'https://cp.zenova.test:7400';

const cp = await startControlPlane(t);
const cwd = tempDir(t);
const env = { ZENOVA_CONTROL_PLANE_URL: cp.url, ZENOVA_ADMIN_TOKEN: ADMIN_TOKEN };
const run = (...argv: string[]): ReturnType<typeof zenova> => zenova(argv, { env, cwd });
const create = (name: string, ...more: string[]): ReturnType<typeof zenova> =>
  run('gateway-node', 'create', '--name', name, '--address', `${name}.example.com`, '--control-plane-url', CALLBACK, ...more);

/** A node whose commands carry --ca-file, and the CA the control plane holds for it. */
async function nodeWithCa(name: string, dir: string): Promise<string> {
  const ca = await createTestCa();
  const caFile = path.join(dir, `${name}-given-ca.pem`);
  writeFileSync(caFile, ca.certPem);
  const created = await create(name, '--ca-file', caFile);
  if (created.code !== 0) throw new Error(`create ${name} failed: ${created.stderr}`);
  return ca.certPem;
}

t.test('a --ca-out file holding something other than PEM certificates is kept byte for byte and refused before the node is created or a command issued', async (t) => {
  const dir = tempDir(t);
  const keep = path.join(dir, 'keep.pem');
  const important = Buffer.from('IMPORTANT\nnot a certificate\n');
  writeFileSync(keep, important);

  const created = await create('edge-keep-create', '--ca-out', keep);
  t.equal(created.code, 2, 'bad usage', { stderr: created.stderr });
  t.match(created.stderr, /^zenova: --ca-out .*keep\.pem exists and holds something other than PEM certificates; it is not overwritten: nothing was sent; pass another --ca-out path, or remove .*keep\.pem first\n/);
  t.notMatch(created.stderr, /IMPORTANT/, 'the file content is not quoted');
  t.equal((await run('gateway-node', 'show', 'edge-keep-create')).code, 1, 'no node was created');

  await nodeWithCa('edge-keep-reissue', dir);
  for (const kind of ['install', 'reenroll', 'upgrade']) {
    const reissued = await run('gateway-node', `${kind}-command`, 'edge-keep-reissue', '--ca-out', keep);
    t.equal(reissued.code, 2, `${kind}-command: bad usage`);
    t.match(reissued.stderr, /holds something other than PEM certificates; it is not overwritten/, kind);
    t.notMatch(reissued.stdout, /zenova install node/, `${kind}-command: no command was issued`);
  }
  t.same(readFileSync(keep), important, 'the file is unchanged');
});

t.test('a --ca-out file holding another certificate is kept byte for byte, and the run shows the command and the CA and says why it failed', async (t) => {
  const dir = tempDir(t);
  const caPem = await nodeWithCa('edge-other-cert', dir);
  const other = await createTestCa();
  const keep = path.join(dir, 'other-ca.pem');
  writeFileSync(keep, other.certPem);
  const before = readFileSync(keep);

  const result = await run('gateway-node', 'install-command', 'edge-other-cert', '--ca-out', keep);
  t.equal(result.code, 1, 'exit 1, as another failure to save a local file');
  t.match(printedCommand(result.stdout), / --ca-file zenova-control-plane-ca\.pem$/, 'the issued command is still shown');
  t.ok(result.stdout.includes(caPem.trim()), 'the CA is printed instead of saved');
  t.notMatch(result.stdout, /Saved the control-plane CA/);
  t.match(result.stderr, /^zenova: --ca-out .*other-ca\.pem already exists and holds something other than this CA, so it was left as is and the CA was not saved there \(it is printed above\); the command shown stands: save the CA by hand, or next time pass another --ca-out path or remove .*other-ca\.pem first\n$/);
  t.same(readFileSync(keep), before, 'the file is unchanged');

  const json = await run('gateway-node', 'reenroll-command', 'edge-other-cert', '--json', '--ca-out', keep);
  t.equal(json.code, 1);
  t.equal(JSON.parse(json.stdout).caPem.trim(), caPem.trim(), 'the JSON answer carries the CA');
  t.match(json.stderr, /other-ca\.pem already exists and holds something other than this CA, so it was left as is and the CA was not saved there \(the JSON answer above carries it\)/);
  t.same(readFileSync(keep), before, 'the file is unchanged after --json too');
});

t.test('the same --ca-out again holds the same CA: the rerun succeeds and leaves the file as is (an empty file is written)', async (t) => {
  const dir = tempDir(t);
  const caPem = await nodeWithCa('edge-same-ca', dir);
  const caOut = path.join(dir, 'ca-out.pem');

  const first = await run('gateway-node', 'install-command', 'edge-same-ca', '--ca-out', caOut);
  t.equal(first.code, 0, 'first run', { stderr: first.stderr });
  t.match(first.stdout, `Saved the control-plane CA to ${caOut}`);
  const saved = readFileSync(caOut);
  t.equal(saved.toString('utf8').trim(), caPem.trim());

  const again = await run('gateway-node', 'install-command', 'edge-same-ca', '--ca-out', caOut);
  t.equal(again.code, 0, 'the rerun exits 0', { stderr: again.stderr });
  t.equal(again.stderr, '');
  t.match(again.stdout, `${caOut} already holds the control-plane CA (left as is): copy it to the node host as zenova-control-plane-ca.pem`);
  t.same(readFileSync(caOut), saved);

  const json = await run('gateway-node', 'upgrade-command', 'edge-same-ca', '--json', '--ca-out', caOut);
  t.equal(json.code, 0, { stderr: json.stderr });
  t.equal(json.stderr, `zenova: ${caOut} already holds the control-plane CA (left as is)\n`);

  // create --ca-file F --ca-out F: the CA given is the CA to save.
  const ca = await createTestCa();
  const both = path.join(dir, 'both.pem');
  writeFileSync(both, ca.certPem);
  const created = await create('edge-same-file', '--ca-file', both, '--ca-out', both);
  t.equal(created.code, 0, { stderr: created.stderr });
  t.match(created.stdout, `${both} already holds the control-plane CA (left as is)`);
  t.equal(readFileSync(both, 'utf8'), ca.certPem);

  // An empty file (touch, mktemp) has nothing to lose: it is written, not refused.
  const empty = path.join(dir, 'empty.pem');
  writeFileSync(empty, '');
  const intoEmpty = await run('gateway-node', 'install-command', 'edge-same-ca', '--ca-out', empty);
  t.equal(intoEmpty.code, 0, { stderr: intoEmpty.stderr });
  t.match(intoEmpty.stdout, `Saved the control-plane CA to ${empty}`);
  t.equal(readFileSync(empty, 'utf8').trim(), caPem.trim());
});

t.test('a --ca-out that is a FIFO or a directory is refused before the node is created or a command issued', async (t) => {
  const dir = tempDir(t);
  const fifo = path.join(dir, 'ca.fifo');
  execFileSync('mkfifo', [fifo]);
  const directory = path.join(dir, 'ca.d');
  mkdirSync(directory);

  for (const [target, message] of [[fifo, /--ca-out .*ca\.fifo exists and is not a regular file \(it is a FIFO, a named pipe\), not a CA file to save over: nothing was sent/], [directory, /--ca-out .*ca\.d is a directory; name the file to write/]] as const) {
    const created = await create('edge-not-file', '--ca-out', target);
    t.equal(created.code, 2, path.basename(target));
    t.match(created.stderr, message);
    t.equal((await run('gateway-node', 'show', 'edge-not-file')).code, 1, `${path.basename(target)}: no node was created`);
  }

  await nodeWithCa('edge-not-file-reissue', dir);
  const reissued = await run('gateway-node', 'install-command', 'edge-not-file-reissue', '--ca-out', fifo);
  t.equal(reissued.code, 2);
  t.match(reissued.stderr, /is a FIFO, a named pipe/);
  t.notMatch(reissued.stdout, /zenova install node/, 'no command was issued');
});
