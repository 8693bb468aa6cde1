/**
 * `zenova status` shows the spool once (the node's own report row), and an unreadable spool never
 * reads as an empty backlog, in text or JSON.
 */
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { formatInstalledStatus, readInstalledStatus, statusJson } from '../../installer/src/commands/status.js';
import type { InstalledStatus } from '../../installer/src/commands/status.js';
import type { NodeStatusReport } from '../../edge-node/src/status/node-status.js';
import { fakeServices, hostEnv } from './fake-host.js';

function status(spool: NodeStatusReport['spool'], lastUpgrade: InstalledStatus['lastUpgrade'] = null): InstalledStatus {
  const node = {
    stateDir: '/opt/zenova-node/data', enrolled: true, node: { id: 'id1', name: 'edge-sh-01', enrolledAt: '2026-01-01T00:00:00Z' }, controlPlaneUrl: 'https://cp.example', gateway: null,
    credential: { expiresAt: '2027-01-01T00:00:00Z', expired: false },
    control: { running: true, pid: 42, connected: true, since: '2026-01-01T00:00:00Z', sessionId: 's1', disconnectedSince: null, lastError: null, updatedAt: 'x', error: null },
    config: { ready: true, version: 7, appliedAt: '2026-01-01T00:00:01Z', notReadyReason: null },
    spool,
  } as unknown as NodeStatusReport;
  return { installed: true, unfinishedInstall: false, installDir: '/opt/zenova-node', version: '0.1.0', brokenCurrent: null, service: { unit: 'node-edge.service', state: 'active' }, readiness: null, node, lastUpgrade, upgradeInterrupted: null, upgradeRunning: null, error: null };
}

t.test('status shows the spool in one row', async (t) => {
  const text = formatInstalledStatus(status({ file: 'f', bytes: 3 * 1024 * 1024, fileBytes: 3 * 1024 * 1024, backlog: 12, open: 0, error: null }));
  t.equal(text.match(/^spool:/gm)?.length, 1, text);
  t.match(text, /^spool: +3\.0 MiB, backlog 12 records not yet delivered$/m);
});

t.test('an unreadable spool shows as unreadable, never as a backlog of 0', async (t) => {
  const text = formatInstalledStatus(status({ file: 'f', bytes: 4096, fileBytes: 4096, backlog: 0, open: 0, error: 'file is not a database' }));
  t.equal(text.match(/^spool:/gm)?.length, 1, text);
  t.match(text, /^spool: +UNREADABLE: file is not a database; run `\/opt\/zenova-node\/current\/bin\/zenova-node doctor --state-dir \/opt\/zenova-node\/data`$/m);
  t.notMatch(text, /backlog 0/);
});

t.test('status --json gives an unreadable spool null counts, not 0', async (t) => {
  const unreadable = JSON.parse(JSON.stringify(statusJson(status({ file: 'f', bytes: 4096, fileBytes: 4096, backlog: 0, open: 0, error: 'file is not a database' }))));
  t.match(unreadable.node.spool, { error: 'file is not a database', backlog: null, open: null });
  const fine = JSON.parse(JSON.stringify(statusJson(status({ file: 'f', bytes: 1, fileBytes: 1, backlog: 3, open: 1, error: null }))));
  t.match(fine.node.spool, { backlog: 3, open: 1, error: null }, 'a readable spool is unchanged');
});

t.test('status shows the last upgrade, and a switched-back one with its reason', async (t) => {
  const spool = { file: 'f', bytes: 1, fileBytes: 1, backlog: 0, open: 0, error: null };
  t.notMatch(formatInstalledStatus(status(spool)), /last upgrade/, 'no row without an upgrade');
  t.match(formatInstalledStatus(status(spool, { from: '0.0.9', to: '0.1.0', at: '2026-12-01T15:00:00.000Z', outcome: 'ready' })), /^last upgrade: +0\.0\.9 → 0\.1\.0 at 2026-12-01T15:00:00\.000Z: ready$/m);
  t.match(
    formatInstalledStatus(status(spool, { from: '0.0.9', to: '0.1.0', at: '2026-12-01T15:00:00.000Z', outcome: 'rolled-back', reason: 'node-edge.service failed to start' })),
    /^last upgrade: +0\.0\.9 → 0\.1\.0 at 2026-12-01T15:00:00\.000Z: SWITCHED BACK to 0\.0\.9 \(node-edge\.service failed to start\)$/m,
  );
});

t.test('an installed node dir without a node identity advises the re-enroll command, not zenova-node (not on the host PATH)', async (t) => {
  const base = status({ file: 'f', bytes: 1, fileBytes: 1, backlog: 0, open: 0, error: null });
  const text = formatInstalledStatus({ ...base, node: { ...base.node!, enrolled: false, node: null } });
  t.match(text, /^node: +not enrolled \(\/opt\/zenova-node\/data\); re-enroll it: `zenova gateway-node reenroll-command NAME`/m);
  t.notMatch(text, /zenova-node enroll/);
});

t.test('status of an install dir that is a file says so in one line, in text and JSON, instead of failing with a stack', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'zn-status-file-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  mkdirSync(join(root, 'srv'));
  writeFileSync(join(root, 'srv/zenova'), 'not a dir\n');
  const read = await readInstalledStatus(hostEnv(root, { services: fakeServices(root) }), '/srv/zenova');
  t.match(read.error, /srv\/zenova\/data: cannot read it \(a part of its path is not a directory\)/);
  t.match(formatInstalledStatus(read), /a part of its path is not a directory/);
  t.match(statusJson(read), { error: /a part of its path is not a directory/ });
});

t.test('the version is read only from a current link to releases/<version>; a link elsewhere shows as unknown, not as its last path part', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'zn-status-link-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  mkdirSync(join(root, 'opt/zenova-node/releases/0.1.0'), { recursive: true });
  const host = hostEnv(root, { services: fakeServices(root) });
  symlinkSync('releases/0.1.0', join(root, 'opt/zenova-node/current'));
  t.equal((await readInstalledStatus(host, '/opt/zenova-node')).version, '0.1.0');
  rmSync(join(root, 'opt/zenova-node/current'));
  symlinkSync('/opt/zenova-node/releases/0.1.0', join(root, 'opt/zenova-node/current'));
  t.equal((await readInstalledStatus(host, '/opt/zenova-node')).version, '0.1.0', 'an absolute link to the release (a manual switch back) too');
  rmSync(join(root, 'opt/zenova-node/current'));
  symlinkSync('/nonexistent', join(root, 'opt/zenova-node/current'));
  const elsewhere = await readInstalledStatus(host, '/opt/zenova-node');
  t.equal(elsewhere.version, null);
  t.match(statusJson(elsewhere), { version: null });
});
