/**
 * The real HostProbe's parsing and probes: mountinfo lines (escaped paths, options, noexec) map a
 * dir to its mount by longest mount point; a port held by a listener is reported busy and free
 * again once released; an address not on this host or a name that does not resolve is reported
 * with its bind error; the host facts it reads are plausible on this machine.
 */
import t from 'tap';
import { createServer } from 'node:net';
import { networkInterfaces } from 'node:os';
import type { AddressInfo } from 'node:net';
import { linuxHostProbe, mountFor, nearestExisting, parseMountInfo } from '../../installer/src/host/linux-host-probe.js';

const NOT_HERE = '192.0.2.1';

const MOUNTINFO = [
  '22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw',
  '30 22 8:2 / /opt rw,nosuid,nodev,noexec,relatime shared:2 - xfs /dev/sda2 rw',
  '31 30 8:3 / /opt/data\\040vol rw,relatime shared:3 - xfs /dev/sda3 rw',
].join('\n');

t.test('mountinfo maps a dir to the longest mount point holding it, with its options', async (t) => {
  const mounts = parseMountInfo(MOUNTINFO);
  t.equal(mounts.length, 3);
  t.match(mountFor(mounts, '/opt/zenova-node'), { mountPoint: '/opt', fsType: 'xfs' });
  t.ok(mountFor(mounts, '/opt/zenova-node')?.options.includes('noexec'), 'noexec seen');
  t.match(mountFor(mounts, '/opt/data vol/zn'), { mountPoint: '/opt/data vol' }, 'escaped spaces decoded');
  t.match(mountFor(mounts, '/optional/zn'), { mountPoint: '/' }, 'a prefix that is not a path component does not match');
});

t.test('a port held by a listener is busy, and free once released', async (t) => {
  const probe = linuxHostProbe();
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  t.equal(await probe.bindError('127.0.0.1', port), 'EADDRINUSE');
  await new Promise<void>((resolve) => server.close(() => resolve()));
  t.equal(await probe.bindError('127.0.0.1', port), undefined);
});

t.test('an address not on this host and a name that does not resolve cannot be bound, and the probe says why', async (t) => {
  const probe = linuxHostProbe();
  // 192.0.2.0/24 is reserved for documentation (RFC 5737): no host has it.
  const local = Object.values(networkInterfaces()).flatMap((list) => (list ?? []).map((i) => i.address));
  t.notOk(local.includes(NOT_HERE), `${NOT_HERE} is not an address of this host`);
  t.equal(await probe.bindError(NOT_HERE, 7480), 'EADDRNOTAVAIL');
  // .invalid never resolves (RFC 6761); without DNS the lookup fails with EAI_AGAIN instead.
  t.match(await probe.bindError('nosuch-host.invalid', 7480), /^(ENOTFOUND|EAI_AGAIN)$/);
});

t.test('the host facts are read and plausible', async (t) => {
  const probe = linuxHostProbe();
  t.ok(((await probe.memoryBytes()) ?? 0) > 64 * 1024 ** 2, 'memory read');
  t.ok(((await probe.freeDiskBytes('/opt/zenova-node-not-there/x')) ?? -1) >= 0, 'free disk at the nearest existing ancestor');
  t.ok(await probe.mountOf('/opt/zenova-node'), 'a mount holds it');
  t.equal(await nearestExisting('/definitely/not/here'), '/');
  t.match(probe.arch(), /^(x86_64|aarch64|.+)$/);
});
