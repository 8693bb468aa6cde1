/**
 * The --check-only command a failed enrollment advises (NODE-ENROLL-FAILED: check the host again,
 * then run the command again) is this run's own command in its check-only form: the same package,
 * control plane, CA file and mode, and the install dir whenever it is not the default, each value
 * shell-quoted and never the token. Run as printed, it checks the dir this run used, not the default.
 */
import t from 'tap';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runInstall } from '../../installer/src/commands/install.js';
import { EnrollError } from '../../edge-node/src/enroll/enroll-errors.js';
import type { Enroller } from '../../installer/src/install/install-node.js';
import { createTestCa } from '../fixtures/tls.js';
import { captureCli, fakeServices, hostEnv } from './fake-host.js';
import { buildNodePackage, releaseKeys } from './package-builder.js';

const keys = releaseKeys();
// A dir a shell would split and unquote: a space and a single quote in it.
const work = mkdtempSync(join(tmpdir(), "zn-cka-it's work-"));
t.teardown(() => rmSync(work, { recursive: true, force: true }));

const unreachable: Enroller = async () => {
  throw new EnrollError('UNREACHABLE', 'cannot reach the control plane at cp.example.test: connect ECONNRESET');
};

/** The words of a POSIX shell line made of plain and single-quoted words (what shellQuote writes). */
function shellWords(line: string): string[] {
  const words: string[] = [];
  const re = /\s*((?:'[^']*'|\\'|[^\s'\\]+)+)/gy;
  for (let m = re.exec(line); m !== null && m[1] !== undefined; m = re.exec(line)) {
    words.push(m[1].replace(/'([^']*)'|\\(')|([^'\\]+)/g, (_all, quoted: string | undefined, escaped: string | undefined, plain: string | undefined) => quoted ?? escaped ?? plain ?? ''));
  }
  return words;
}

/** The command in backquotes after "check the host again with". */
function advisedCommand(out: string): string | undefined {
  return /check the host again with `([^`]+)`/.exec(out)?.[1];
}

function freshRoot(): string {
  const root = mkdtempSync(join(tmpdir(), 'zn-cka-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  return root;
}

t.test('a failed enrollment with a non-default --install-dir advises a --check-only command carrying that dir, which checks it when run', async (t) => {
  const pkg = await buildNodePackage(work, keys);
  const root = freshRoot();
  // The fake control plane takes any CA; the file only has to hold a certificate.
  const ca = join(work, 'cp ca.pem');
  writeFileSync(ca, (await createTestCa()).certPem);
  const host = hostEnv(root, { keyPem: keys.publicKeyPem, services: fakeServices(root), enroll: unreachable });
  const cli = captureCli(work);
  const exit = await runInstall(['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--token', 'zn_it_SECRETTOKEN1', '--ca-file', ca, '--install-dir', '/data/zn-node'], cli.ctx, host);
  t.equal(exit, 1);
  t.match(cli.out(), /Install failed: NODE-ENROLL-FAILED/);
  const command = advisedCommand(cli.out());
  if (command === undefined) return void t.fail(`no check command advised:\n${cli.out()}`);
  const q = (s: string): string => `'${s.replaceAll("'", "'\\''")}'`;
  t.equal(command, `sudo ./zenova install node --package ${q(pkg.file)} --control-plane 'https://cp.example.test' --ca-file ${q(ca)} --install-dir '/data/zn-node' --check-only`);
  t.notMatch(cli.out(), /SECRETTOKEN/, 'the token is printed nowhere');

  const words = shellWords(command);
  t.same(words.slice(0, 4), ['sudo', './zenova', 'install', 'node']);
  t.equal(words[words.indexOf('--package') + 1], pkg.file, 'a shell reads the package path back whole');
  t.equal(words[words.indexOf('--ca-file') + 1], ca);
  const check = captureCli(work);
  await runInstall(words.slice(3), check.ctx, hostEnv(root, { keyPem: keys.publicKeyPem, services: fakeServices(root) }));
  t.match(check.out(), /^zenova install node --check-only: checking this host/);
  t.match(check.out(), /✓ install dir \/data\/zn-node\n/, 'the advised command checks the dir this run used');
  t.match(check.out(), /✓ CA file /, 'with the CA file given');
  t.notMatch(check.out(), /\/opt\/zenova-node/, 'not the default dir');
});

t.test('with the default dir the advised command names no --install-dir; --reenroll is carried', async (t) => {
  const pkg = await buildNodePackage(work, keys, { name: `b-${Math.random()}.zpkg` });
  const root = freshRoot();
  const ok: Enroller = async (opts) => {
    mkdirSync(opts.stateDir, { recursive: true, mode: 0o700 });
    writeFileSync(join(opts.stateDir, 'identity.json'), '{"nodeName":"n1"}');
    return { nodeId: 'id-1', nodeName: 'n1', controlPlaneUrl: opts.controlPlaneUrl, gatewayTarget: 'gw:8443', stateDir: opts.stateDir, reenrolled: opts.reenroll };
  };
  const services = fakeServices(root);
  const first = captureCli(work);
  t.equal(await runInstall(['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--token', 'zn_it_INSTALL0001'], first.ctx, hostEnv(root, { keyPem: keys.publicKeyPem, services, enroll: ok })), 0, first.out());
  const cli = captureCli(work);
  const exit = await runInstall(['node', '--package', pkg.file, '--reenroll', '--control-plane', 'https://cp.example.test', '--token', 'zn_it_REENROLL001'], cli.ctx, hostEnv(root, { keyPem: keys.publicKeyPem, services, enroll: unreachable }));
  t.equal(exit, 1);
  const command = advisedCommand(cli.out());
  if (command === undefined) return void t.fail(`no check command advised:\n${cli.out()}`);
  t.equal(command, `sudo ./zenova install node --package '${pkg.file.replaceAll("'", "'\\''")}' --reenroll --control-plane 'https://cp.example.test' --check-only`);
});
