/**
 * An install dir that already has etc/ or data/ is accepted only when they hold the installer's and
 * the node's own files: an application's etc/node.env or data/app.db is NODE-DIR-NOT-EMPTY naming
 * the entry, and nothing of it is overwritten. The same for current, updater and releases/: only
 * links into releases/ and releases the installer unpacked (their release-manifest.json) pass, so
 * another application's are never replaced, nor deleted by a rollback. A kept data/ ends up 0700
 * whatever its mode was.
 */
import t from 'tap';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { runInstall } from '../../installer/src/commands/install.js';
import { isRateLimitFileLeftover, isSpoolFileLeftover, isSpoolOwnerLock, NODE_CONFIG_APPLY_LOCK_FILE, NODE_CONFIG_CACHE_DIR, NODE_RETIRED_DIR, NODE_STATE_JSON_FILES, NODE_STATE_SQLITE_FILES } from '../../installer/src/install/install-dir-contents.js';
import type { Enroller } from '../../installer/src/install/install-node.js';
import { IDENTITY_FILE } from '../../edge-node/src/state/identity.js';
import { CREDENTIAL_FILE } from '../../edge-node/src/state/credential-store.js';
import { CONTROL_STATUS_FILE } from '../../edge-node/src/control/control-status.js';
import { APPLIED_VERSION_FILE, CONFIG_APPLY_LOCK_FILE } from '../../edge-node/src/config/applied-version.js';
import { SPOOL_MARKER_FILE } from '../../edge-node/src/spool/spool-marker.js';
import { newSpoolTempFile, SPOOL_FILE } from '../../edge-node/src/spool/spool-file.js';
import { spoolOpenLockFile } from '../../edge-node/src/spool/open-node-spool.js';
import { MAX_OWNER_SLOTS, soleProcessLockFile, spoolOwnerLockFile } from '../../edge-node/src/spool/spool-owner-lock.js';
import { LEASE_DB_FILE } from '../../edge-node/src/billing/lease-store.js';
import { damagedRateLimitFile, rateLimitOpenLockFile } from '../../edge-node/src/rate-limit/rate-limit-file.js';
import { RATE_LIMIT_FILE } from '../../edge-node/src/rate-limit/sqlite-limit-store.js';
import { SESSION_OWNER_FILE } from '../../edge-node/src/providers/mcp/sqlite-session-owner-store.js';
import { CONTROL_LINK_LOCK_FILE } from '../../edge-node/src/control/control-link-lock.js';
import { CONFIG_CACHE_DIR } from '../../edge-node/src/config/bundle-cache.js';
import { ENROLL_ATTEMPT_FILE } from '../../edge-node/src/enroll/enroll-attempt.js';
import { RETIRED_DIR } from '../../edge-node/src/enroll/retire-node-state.js';
import { EnrollError } from '../../edge-node/src/enroll/enroll-errors.js';
import { productVersion } from '../../proto/src/product-version.js';
import { captureCli, fakeServices, hostEnv, listTree } from './fake-host.js';
import { buildNodePackage, releaseKeys } from './package-builder.js';

const keys = releaseKeys();
const version = productVersion();
const work = mkdtempSync(join(tmpdir(), 'zn-contents-work-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));

let pkg = '';
t.before(async () => {
  pkg = (await buildNodePackage(work, keys)).file;
});

const enrollOk: Enroller = async (opts) => {
  mkdirSync(opts.stateDir, { recursive: true, mode: 0o700 });
  writeFileSync(join(opts.stateDir, 'identity.json'), '{"nodeName":"n1"}');
  return { nodeId: 'id-1', nodeName: 'n1', controlPlaneUrl: opts.controlPlaneUrl, gatewayTarget: 'gw:8443', stateDir: opts.stateDir, reenrolled: opts.reenroll };
};

/**
 * A host root with /data/app laid out by `files` (relative path → content; a trailing / makes a dir;
 * `-> target` makes a symlink).
 */
function hostWith(files: Record<string, string>): string {
  const root = mkdtempSync(join(tmpdir(), 'zn-contents-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  mkdirSync(join(root, 'etc/systemd/system'), { recursive: true });
  for (const [rel, content] of Object.entries(files)) {
    const full = join(root, 'data/app', rel);
    if (rel.endsWith('/')) mkdirSync(full, { recursive: true });
    else if (content.startsWith('-> ')) {
      mkdirSync(join(full, '..'), { recursive: true });
      symlinkSync(content.slice(3), full);
    } else {
      mkdirSync(join(full, '..'), { recursive: true });
      writeFileSync(full, content);
    }
  }
  return root;
}

async function install(root: string, enroll: Enroller = enrollOk): Promise<{ exit: number; out: string }> {
  const cli = captureCli(work);
  const exit = await runInstall(
    ['node', '--package', pkg, '--control-plane', 'https://cp.example.test', '--token', 'zn_it_CONTENTS1', '--install-dir', '/data/app'],
    cli.ctx,
    hostEnv(root, { keyPem: keys.publicKeyPem, services: fakeServices(root), enroll }),
  );
  return { exit, out: cli.out() };
}

const cases: Array<[string, Record<string, string>, RegExp]> = [
  ['an application\'s own etc/node.env', { 'etc/node.env': 'APP_SETTING=important\n' }, /\/data\/app already holds etc\/node\.env \(not written by zenova install node\)/],
  ['another file in etc/', { 'etc/app.conf': 'x=1\n' }, /\/data\/app already holds etc\/app\.conf/],
  ['an application database in data/', { 'data/app.db': 'customer data' }, /\/data\/app already holds data\/app\.db/],
  ['a data/retired/ entry the node never names so', { 'data/retired/backups/app.db': 'customer data' }, /\/data\/app already holds data\/retired\/backups/],
  ['a foreign file in data/config/', { 'data/config/settings.yaml': 'a: 1\n' }, /\/data\/app already holds data\/config\/settings\.yaml/],
  ['a node identity beside foreign files (not a node\'s data/)', { 'data/identity.json': '{}', 'data/app.db': 'customer data' }, /\/data\/app already holds data\/app\.db/],
  [
    'an application\'s own current file and releases/<version>/ (the version being installed)',
    { current: 'another application\'s state\n', [`releases/${version}/db.sqlite`]: 'precious data' },
    new RegExp(`/data/app already holds current \\(not a link into releases/\\), releases/${version.replace(/\./g, '\\.')} \\(not a release unpacked by zenova install node\\)`),
  ],
  ['an updater link elsewhere', { updater: '-> /srv/other/updater' }, /\/data\/app already holds updater \(not a link into releases\/\)/],
  ['a current link out of releases/ through ..', { current: '-> releases/..', 'releases/': '' }, /\/data\/app already holds current \(not a link into releases\/\)/],
  ['a releases link to another dir', { releases: '-> /srv/other/releases' }, /\/data\/app already holds releases \(not a directory\)/],
  ['a releases/<version>/ with a launcher but no release manifest', { [`releases/${version}/bin/zenova-node`]: '#!/bin/sh\n' }, /already holds releases\/[^ ]+ \(not a release unpacked by zenova install node\)/],
  [
    'a release manifest of another version',
    { 'releases/9.9.9/release-manifest.json': JSON.stringify({ product: 'zenova-node', version: '1.0.0', platform: { os: 'linux', arch: 'x86_64' }, protocolVersion: 1, files: [{ path: 'bin/zenova-node', sha256: '0'.repeat(64), mode: 0o755, size: 1 }], createdAt: '2026-01-01T00:00:00Z' }) },
    /already holds releases\/9\.9\.9 \(not a release unpacked by zenova install node\)/,
  ],
];

for (const [name, files, cause] of cases) {
  t.test(`an install dir with ${name} is refused as NODE-DIR-NOT-EMPTY naming it, and nothing is written`, async (t) => {
    const root = hostWith(files);
    const before = listTree(root);
    const r = await install(root);
    t.equal(r.exit, 1);
    t.match(r.out, /✗ NODE-DIR-NOT-EMPTY: /);
    t.match(r.out, cause);
    t.notMatch(r.out, /NODE-DATA-EXISTS/);
    t.same(listTree(root), before, 'the host root is unchanged');
  });
}

t.test('the installer\'s own etc/ and the node\'s data/ left by a rolled-back attempt are accepted, and data/ ends up 0700', async (t) => {
  const root = hostWith({
    'etc/node.env': '# Written by `zenova install node`. No secrets here: the identity and credential are in /data/app/data.\nZENOVA_NODE_LISTEN=0.0.0.0:7480\n',
    'etc/control-plane-ca.pem': '-----BEGIN CERTIFICATE-----\n',
    'etc/.node.env.0123456789ab.tmp': '',
    'data/spool.db': 'unsent records',
    'data/spool.db-wal': '',
    'data/spool.db-shm': '',
    'data/spool.json': '{}',
    'data/update-state.json': '{}',
    'data/.update-state.json.abcdef012345.tmp': '',
    'data/spool-owner-0.lock': '',
    'data/spool-owner-1.lock': '',
    'data/spool.db.lock': '',
    'data/spool.db.new-0123456789ab': '',
    'data/.credential.json.abcdef012345.tmp': '',
    'data/rate-limits.sqlite': '',
    'data/rate-limits.sqlite.lock': '',
    'data/rate-limits.sqlite.damaged-20261202T040516.123Z': 'damaged counters',
    'data/config/current.json': '{}',
    'data/config/.previous.json.abcdef012345.tmp': '',
    'data/retired/edge-1-5d0a3fc6-20260101T120000Z/spool.db': 'a deleted node\'s records',
    'data/retired/edge-1-5d0a3fc6-20260101T120000Z-2/spool.db': 'a deleted node\'s records, moved twice within one second',
    'data/retired/.edge-1-5d0a3fc6-20260102T120000Z.partial/spool.db': '',
  });
  chmodSync(join(root, 'data/app/data'), 0o755);
  const r = await install(root);
  t.equal(r.exit, 0, r.out);
  t.notMatch(r.out, /NODE-DIR-NOT-EMPTY/);
  t.equal(readFileSync(join(root, 'data/app/data/spool.db'), 'utf8'), 'unsent records', 'data/ is kept');
  t.equal(statSync(join(root, 'data/app/data')).mode & 0o777, 0o700, 'data/ is private');
  t.match(readFileSync(join(root, 'data/app/etc/node.env'), 'utf8'), /^# Written by `zenova install node`/);
  t.ok(readdirSync(join(root, 'data/app/data')).includes('identity.json'));
});

t.test('the state files the installer accepts in data/ are the ones the node writes', async (t) => {
  t.same([...NODE_STATE_JSON_FILES].sort(), [IDENTITY_FILE, CREDENTIAL_FILE, CONTROL_STATUS_FILE, APPLIED_VERSION_FILE, SPOOL_MARKER_FILE, ENROLL_ATTEMPT_FILE].sort());
  t.same([...NODE_STATE_SQLITE_FILES].sort(), [SPOOL_FILE, LEASE_DB_FILE, RATE_LIMIT_FILE, SESSION_OWNER_FILE, CONTROL_LINK_LOCK_FILE].sort());
  t.equal(NODE_CONFIG_CACHE_DIR, CONFIG_CACHE_DIR);
  t.equal(NODE_CONFIG_APPLY_LOCK_FILE, CONFIG_APPLY_LOCK_FILE);
  t.equal(NODE_RETIRED_DIR, RETIRED_DIR);
  for (const slot of [0, 1, MAX_OWNER_SLOTS - 1]) t.ok(isSpoolOwnerLock(basename(spoolOwnerLockFile(join('/x', SPOOL_FILE), slot))), `owner slot ${slot}`);
  t.ok(isSpoolOwnerLock(basename(soleProcessLockFile(join('/x', SPOOL_FILE)))), 'the sole-process lock');
  t.notOk(isSpoolOwnerLock('spool-owner-x.lock'));
  const spoolFile = join('/x', SPOOL_FILE);
  for (const name of [newSpoolTempFile(spoolFile), `${newSpoolTempFile(spoolFile)}-journal`, spoolOpenLockFile(spoolFile), 'spool.db.new-4242']) {
    t.ok(isSpoolFileLeftover(basename(name)), basename(name));
  }
  t.notOk(isSpoolFileLeftover('spool.db.new-backup'));
  const rateLimitFile = join('/x', RATE_LIMIT_FILE);
  for (const name of [rateLimitOpenLockFile(rateLimitFile), damagedRateLimitFile(rateLimitFile, new Date()), `${damagedRateLimitFile(rateLimitFile, new Date(0))}-wal`]) {
    t.ok(isRateLimitFileLeftover(basename(name)), basename(name));
  }
  t.notOk(isRateLimitFileLeftover('rate-limits.sqlite.damaged-yesterday'));
});

t.test('an install rolled back after its token was refused leaves a dir the next install accepts', async (t) => {
  const root = hostWith({});
  const refused = await install(root, async () => {
    throw new EnrollError('ZN_ERR_CP_TOKEN_USED', 'The token was already used');
  });
  t.equal(refused.exit, 1, refused.out);
  t.match(refused.out, /rolled back what this run wrote/);
  const r = await install(root);
  t.equal(r.exit, 0, r.out);
  t.notMatch(r.out, /NODE-DIR-NOT-EMPTY/);
});

t.test('the remains of an install of our own killed before its rollback (release, links, a partial unpack) are accepted and the release replaced', async (t) => {
  const root = hostWith({});
  const first = await install(root);
  t.equal(first.exit, 0, first.out);
  // Killed before it enrolled or wrote the units: no unit, no data/.
  rmSync(join(root, 'etc/systemd/system'), { recursive: true, force: true });
  mkdirSync(join(root, 'etc/systemd/system'));
  rmSync(join(root, 'data/app/data'), { recursive: true, force: true });
  mkdirSync(join(root, `data/app/releases/.${version}.partial-0123abcd/bin`), { recursive: true });
  writeFileSync(join(root, `data/app/releases/${version}/stale-file`), 'from the killed run');
  t.same(readdirSync(join(root, 'data/app')).sort(), ['current', 'etc', 'releases', 'updater']);

  const r = await install(root);
  t.equal(r.exit, 0, r.out);
  t.notMatch(r.out, /NODE-DIR-NOT-EMPTY/);
  t.equal(readlinkSync(join(root, 'data/app/current')), `releases/${version}`);
  t.equal(readlinkSync(join(root, 'data/app/updater')), `releases/${version}`);
  t.notOk(existsSync(join(root, `data/app/releases/${version}/stale-file`)), 'the release was unpacked again');
  t.ok(existsSync(join(root, `data/app/releases/${version}/release-manifest.json`)), 'and carries its manifest again');
});

t.test('a release an installer from before release manifests unpacked, beside its etc/node.env, is ours: accepted and unpacked again', async (t) => {
  const root = hostWith({
    [`releases/${version}/bin/zenova-node`]: '#!/bin/sh\n',
    current: `-> releases/${version}`,
    updater: `-> releases/${version}`,
    'etc/node.env': '# Written by `zenova install node`. No secrets here: the identity and credential are in /data/app/data.\nZENOVA_NODE_LISTEN=0.0.0.0:7480\n',
  });
  const r = await install(root);
  t.equal(r.exit, 0, r.out);
  t.notMatch(r.out, /NODE-DIR-NOT-EMPTY/);
  t.ok(existsSync(join(root, `data/app/releases/${version}/release-manifest.json`)), 'the release now carries its manifest');
});

t.test('without the installer\'s etc/node.env beside it, a release without a manifest stays foreign', async (t) => {
  const root = hostWith({
    [`releases/${version}/bin/zenova-node`]: '#!/bin/sh\n',
    'etc/node.env': 'APP_MODE=production\n',
  });
  const before = listTree(root);
  const r = await install(root);
  t.equal(r.exit, 1);
  t.match(r.out, /NODE-DIR-NOT-EMPTY/);
  t.same(listTree(root), before, 'the host root is unchanged');
});
