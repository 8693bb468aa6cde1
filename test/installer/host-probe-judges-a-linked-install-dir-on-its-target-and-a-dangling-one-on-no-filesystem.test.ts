/**
 * The real HostProbe judges an install dir where the install would put it: through a symbolic link
 * to an existing dir, on that dir's filesystem (its mount, not the mount holding the link); through a
 * link whose target does not exist (a volume not mounted yet), on no filesystem at all — free disk,
 * mount and SELinux label unknown, and a write refused with ENOENT at that link — instead of on the
 * link's parent, another filesystem than the node's would be.
 */
import t from 'tap';
import { mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DanglingLinkError, linuxHostProbe, nearestExisting } from '../../installer/src/host/linux-host-probe.js';

const base = realpathSync(mkdtempSync(join(tmpdir(), 'zn-probe-links-')));
t.teardown(() => rmSync(base, { recursive: true, force: true }));
mkdirSync(join(base, 'data'));
mkdirSync(join(base, 'disk'));
symlinkSync(join(base, 'srv/nowhere'), join(base, 'data/zn'));
symlinkSync('mnt/disk', join(base, 'gone'));
symlinkSync('disk', join(base, 'vol'));

t.test('a dir that is, or is under, a dangling link has no nearest existing dir: the link and its target are named', async (t) => {
  await t.rejects(nearestExisting(join(base, 'data/zn')), new DanglingLinkError({ link: join(base, 'data/zn'), target: join(base, 'srv/nowhere') }));
  await t.rejects(nearestExisting(join(base, 'data/zn/releases')), new DanglingLinkError({ link: join(base, 'data/zn'), target: join(base, 'srv/nowhere') }));
  await t.rejects(nearestExisting(join(base, 'gone/zn')), new DanglingLinkError({ link: join(base, 'gone'), target: join(base, 'mnt/disk') }));
});

t.test('the probe judges a dir behind a dangling link on no filesystem: disk, mount and label unknown, a write refused at the link', async (t) => {
  const probe = linuxHostProbe();
  for (const [dir, link] of [[join(base, 'data/zn'), join(base, 'data/zn')], [join(base, 'gone/zn'), join(base, 'gone')]] as const) {
    t.equal(await probe.freeDiskBytes(dir), undefined, `${dir}: free disk unknown, not its parent's`);
    t.equal(await probe.mountOf(dir), undefined, `${dir}: mount unknown, not its parent's`);
    t.equal(await probe.selinuxType(dir), undefined, `${dir}: label unknown`);
    t.same(await probe.writeError(dir), { dir: link, code: 'ENOENT' }, `${dir}: a write fails at the link`);
  }
});

t.test('a dir not created yet behind a link to an existing dir is judged on that dir, and on its mount', async (t) => {
  t.equal(await nearestExisting(join(base, 'vol/zn')), join(base, 'disk'), 'the link followed');
  t.equal(await nearestExisting(join(base, 'data/new/zn')), join(base, 'data'), 'a real parent as before');
  const probe = linuxHostProbe();
  t.equal(await probe.writeError(join(base, 'vol/zn')), undefined);
  t.ok(((await probe.freeDiskBytes(join(base, 'vol/zn'))) ?? -1) >= 0);
  // A link into another mount: the mount is the target's, not the one holding the link.
  const shm = '/dev/shm';
  const shmMount = await probe.mountOf(shm);
  const baseMount = await probe.mountOf(base);
  if (shmMount === undefined || baseMount === undefined || shmMount.mountPoint === baseMount.mountPoint) {
    t.comment('no /dev/shm mount apart from the temp dir\'s on this host: the mount of a link\'s target not checked');
    return;
  }
  symlinkSync(shm, join(base, 'shm'));
  t.same(await probe.mountOf(join(base, 'shm/zenova-node')), shmMount, 'the target\'s mount');
});
