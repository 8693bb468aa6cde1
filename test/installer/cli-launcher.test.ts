/**
 * The launcher the operator ran is found from the bundle's location, as the installer tarball and a
 * release lay them out, and named the way it can be pasted from the working dir.
 */
import t from 'tap';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { launcherCommand } from '../../installer/src/cli-launcher.js';

function tree(layout: 'tarball' | 'release' | 'none', name = 'zenova-installer-0.1.0-linux-x86_64'): { root: string; bundleUrl: string } {
  const base = mkdtempSync(join(tmpdir(), 'zn-launcher-'));
  t.teardown(() => rmSync(base, { recursive: true, force: true }));
  const root = join(base, name);
  mkdirSync(join(root, 'app/installer'), { recursive: true });
  writeFileSync(join(root, 'app/installer/zenova.mjs'), '');
  if (layout === 'tarball') writeFileSync(join(root, 'zenova'), '#!/bin/sh\n');
  if (layout === 'release') {
    mkdirSync(join(root, 'bin'));
    writeFileSync(join(root, 'bin/zenova'), '#!/bin/sh\n');
  }
  return { root, bundleUrl: pathToFileURL(join(root, 'app/installer/zenova.mjs')).href };
}

t.test('the installer tarball\'s launcher run from its own dir is named ./zenova', async (t) => {
  const { root, bundleUrl } = tree('tarball');
  t.equal(launcherCommand(bundleUrl, root), './zenova');
});

t.test('run from elsewhere, the launcher is named by its full path (quoted when it needs to be)', async (t) => {
  const plain = tree('tarball');
  t.equal(launcherCommand(plain.bundleUrl, '/'), join(plain.root, 'zenova'));
  const spaced = tree('tarball', 'my installer');
  t.equal(launcherCommand(spaced.bundleUrl, '/'), `'${join(spaced.root, 'zenova')}'`);
});

t.test('a release\'s CLI is its bin/zenova; without a launcher (the source tree) nothing is named', async (t) => {
  const release = tree('release', '0.1.0');
  t.equal(launcherCommand(release.bundleUrl, '/'), join(release.root, 'bin/zenova'));
  const none = tree('none');
  t.equal(launcherCommand(none.bundleUrl, none.root), undefined);
});
