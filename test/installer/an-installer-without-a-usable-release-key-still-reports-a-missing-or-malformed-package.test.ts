/**
 * docs/diagnostics.md: one run lists everything to fix. An installer without its release key (a
 * repository checkout) or with a damaged one still reads the --package file: a missing file is
 * NODE-PKG-UNREADABLE and a file that is no .zpkg is NODE-PKG-FORMAT, each beside the key's
 * NODE-PKG-SIGNATURE; a whole package adds nothing to it. `--check-only` and with a token alike,
 * nothing written under the (real, temporary) host root.
 */
import t from 'tap';
import { mkdirSync, mkdtempSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runInstall } from '../../installer/src/commands/install.js';
import type { HostEnv } from '../../installer/src/host/host-env.js';
import { captureCli, hostEnv, listTree } from './fake-host.js';
import { buildNodePackage, releaseKeys } from './package-builder.js';

const keys = releaseKeys();
const work = mkdtempSync(join(tmpdir(), 'zn-keyless-pkg-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));

async function attempt(pkg: string, trustedKeyPem: HostEnv['trustedKeyPem'], withToken: boolean): Promise<{ exit: number; out: string; changed: boolean }> {
  const root = mkdtempSync(join(tmpdir(), 'zn-keyless-root-'));
  try {
    mkdirSync(join(root, 'etc/systemd/system'), { recursive: true });
    const before = listTree(root);
    const cli = captureCli(work);
    const exit = await runInstall(
      ['node', '--package', pkg, '--control-plane', 'https://cp.example.test', ...(withToken ? ['--token', 'tok_never_used'] : ['--check-only']), '--install-dir', '/srv/x/node'],
      cli.ctx,
      hostEnv(root, { trustedKeyPem }),
    );
    return { exit, out: cli.out(), changed: JSON.stringify(listTree(root)) !== JSON.stringify(before) };
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

const KEYS: Array<[string, HostEnv['trustedKeyPem'], RegExp]> = [
  ['no release key', async () => undefined, /✗ NODE-PKG-SIGNATURE: this installer carries no trusted release key \(installer\/release-signing-key\.pub\.pem\), so no package can be verified\n/],
  ['a damaged release key', async () => 'hello', /✗ NODE-PKG-SIGNATURE: the installer's release key \(installer\/release-signing-key\.pub\.pem\) is unreadable or damaged \(.+\): unpack the installer again\n/],
  ['an unreadable release key', async () => { throw Object.assign(new Error('permission denied'), { code: 'EACCES' }); }, /✗ NODE-PKG-SIGNATURE: the installer's release key \(installer\/release-signing-key\.pub\.pem\) is unreadable or damaged \(cannot read it: EACCES\)/],
];

t.test('a missing package is NODE-PKG-UNREADABLE beside the release key\'s NODE-PKG-SIGNATURE', async (t) => {
  const missing = join(work, 'nonexist.zpkg');
  for (const [name, trustedKeyPem, signature] of KEYS) {
    for (const withToken of [false, true]) {
      const r = await attempt(missing, trustedKeyPem, withToken);
      const what = `${name}${withToken ? ', with a token' : ', --check-only'}`;
      t.equal(r.exit, 1, `${what}: exit 1`);
      t.match(r.out, signature, `${what}: the key's finding`);
      t.match(r.out, `✗ NODE-PKG-UNREADABLE: cannot read the package ${missing} (ENOENT)\n`, `${what}: the missing file too`);
      t.match(r.out, /→ Check the --package path and that the file was copied completely/, `${what}: with its advice`);
      t.equal(r.changed, false, `${what}: nothing written`);
    }
  }
});

t.test('a file that is no .zpkg, or a truncated one, is NODE-PKG-FORMAT beside the release key\'s NODE-PKG-SIGNATURE', async (t) => {
  const notPackage = join(work, 'notes.zpkg');
  writeFileSync(notPackage, 'these are not the bytes of a package\n');
  const truncated = (await buildNodePackage(work, keys, { name: 'truncated.zpkg' })).file;
  truncateSync(truncated, 100);
  const cases: Array<[string, string, RegExp]> = [
    ['not a package', notPackage, /✗ NODE-PKG-FORMAT: the file is not a \.zpkg \(wrong magic bytes\)\n/],
    ['truncated', truncated, /✗ NODE-PKG-FORMAT: the file ends inside the manifest \(truncated download\?\)\n/],
  ];
  for (const [pkgName, pkg, format] of cases) {
    for (const [name, trustedKeyPem, signature] of KEYS) {
      const r = await attempt(pkg, trustedKeyPem, false);
      t.equal(r.exit, 1, `${pkgName}, ${name}: exit 1`);
      t.match(r.out, signature, `${pkgName}, ${name}: the key's finding`);
      t.match(r.out, format, `${pkgName}, ${name}: the malformed file too`);
      t.equal(r.changed, false, `${pkgName}, ${name}: nothing written`);
    }
  }
});

t.test('a whole package adds nothing to the release key\'s NODE-PKG-SIGNATURE: its signature is not judged without the key', async (t) => {
  const good = (await buildNodePackage(work, keys, { name: 'good.zpkg' })).file;
  for (const [name, trustedKeyPem, signature] of KEYS) {
    const r = await attempt(good, trustedKeyPem, false);
    t.equal(r.exit, 1, `${name}: exit 1`);
    t.match(r.out, signature, `${name}: the key's finding`);
    t.match(r.out, /\n1 blocking finding; nothing was written/, `${name}: the key's is the one finding`);
    t.notMatch(r.out, /NODE-PKG-(UNREADABLE|FORMAT|CHECKSUM|NEWER|PRODUCT)/, `${name}: the package read, nothing found`);
    t.notMatch(r.out, /does not verify|Download the package again/, `${name}: the package is not blamed`);
  }
});
