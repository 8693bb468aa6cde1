/**
 * The install puts `zenova` on PATH (seed 004 §9.5 runs `sudo zenova status`): a link
 * /usr/local/bin/zenova → <dir>/current/bin/zenova under the host root. Something that is not a
 * node installation's CLI is never replaced (reported instead), and the success message then names
 * the full path.
 */
import t from 'tap';
import { mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runInstall } from '../../installer/src/commands/install.js';
import type { Enroller } from '../../installer/src/install/install-node.js';
import { captureCli, fakeServices, hostEnv } from './fake-host.js';
import { buildNodePackage, releaseKeys } from './package-builder.js';

const keys = releaseKeys();
const work = mkdtempSync(join(tmpdir(), 'zn-link-work-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));
const enrollOk: Enroller = async (opts) => {
  mkdirSync(opts.stateDir, { recursive: true, mode: 0o700 });
  writeFileSync(join(opts.stateDir, 'identity.json'), '{}');
  return { nodeId: 'id-1', nodeName: 'n1', controlPlaneUrl: opts.controlPlaneUrl, gatewayTarget: 'gw:8443', stateDir: opts.stateDir, reenrolled: opts.reenroll };
};

async function install(t: { name: string; teardown(fn: () => unknown): void }, prepare: (root: string) => void = () => undefined): Promise<{ root: string; exit: number; out: string }> {
  const pkg = await buildNodePackage(work, keys, { name: `${t.name.length}-${Math.random().toString(36).slice(2)}.zpkg` });
  const root = mkdtempSync(join(tmpdir(), 'zn-link-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  prepare(root);
  const cli = captureCli(work);
  const exit = await runInstall(['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--token', 'tok_install_1'], cli.ctx, hostEnv(root, { keyPem: keys.publicKeyPem, services: fakeServices(root), enroll: enrollOk }));
  return { root, exit, out: cli.out() };
}

t.test('an install links /usr/local/bin/zenova to the current release\'s CLI, so "zenova status" works', async (t) => {
  const r = await install(t);
  t.equal(r.exit, 0, r.out);
  t.equal(readlinkSync(join(r.root, 'usr/local/bin/zenova')), '/opt/zenova-node/current/bin/zenova');
  t.match(r.out, /✓ \/usr\/local\/bin\/zenova → \/opt\/zenova-node\/current\/bin\/zenova\n/);
  t.match(r.out, /Check it: +zenova status\n/);
});

t.test('a file at /usr/local/bin/zenova that is not ours is left alone and reported; the install goes on', async (t) => {
  const r = await install(t, (root) => {
    mkdirSync(join(root, 'usr/local/bin'), { recursive: true });
    writeFileSync(join(root, 'usr/local/bin/zenova'), '#!/bin/sh\necho another zenova\n');
  });
  t.equal(r.exit, 0, r.out);
  t.equal(readFileSync(join(r.root, 'usr/local/bin/zenova'), 'utf8'), '#!/bin/sh\necho another zenova\n', 'not overwritten');
  t.match(r.out, /! NODE-CLI-LINK: \/usr\/local\/bin\/zenova exists and is not a link; it was left as it is/);
  t.match(r.out, /Check it: +\/opt\/zenova-node\/current\/bin\/zenova status\n/, 'the message names the full path');
});

t.test('a link elsewhere that is not a node installation\'s CLI is left alone and reported', async (t) => {
  const r = await install(t, (root) => {
    mkdirSync(join(root, 'usr/local/bin'), { recursive: true });
    symlinkSync('/opt/zenova/current/bin/zenova', join(root, 'usr/local/bin/zenova'));
  });
  t.equal(r.exit, 0, r.out);
  t.equal(readlinkSync(join(r.root, 'usr/local/bin/zenova')), '/opt/zenova/current/bin/zenova', 'the central install\'s link is kept');
  t.match(r.out, /! NODE-CLI-LINK: \/usr\/local\/bin\/zenova already links to \/opt\/zenova\/current\/bin\/zenova, which is not a node installation's CLI/);
});

t.test('a stale link to another node dir\'s CLI is ours and is replaced', async (t) => {
  const r = await install(t, (root) => {
    mkdirSync(join(root, 'usr/local/bin'), { recursive: true });
    symlinkSync('/data/old-node/current/bin/zenova', join(root, 'usr/local/bin/zenova'));
  });
  t.equal(r.exit, 0, r.out);
  t.equal(readlinkSync(join(r.root, 'usr/local/bin/zenova')), '/opt/zenova-node/current/bin/zenova');
  t.notMatch(r.out, /NODE-CLI-LINK/);
});
