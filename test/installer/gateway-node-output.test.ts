// The pure parts of `zenova gateway-node`: env files, the figures' formats, the node table.
import t from 'tap';
import { EnvFileError, parseEnvFile } from '../../installer/src/connection/env-file.js';
import { formatAge, formatBytes, formatRatio, formatSkew } from '../../installer/src/format/units.js';
import type { NodeView } from '../../installer/src/commands/gateway-node/api-schemas.js';
import { renderNodeDetail, renderNodeTable } from '../../installer/src/commands/gateway-node/node-format.js';
import { caFileInCommand } from '../../installer/src/commands/gateway-node/one-time-command-output.js';

t.test('an env file is KEY=VALUE lines with comments, export and quotes', async (t) => {
  t.same(parseEnvFile('# comment\n\nexport A=1\nB = "two words"\nC=\'x=y\'\nD=\r\n', 'f'), { A: '1', B: 'two words', C: 'x=y', D: '' });
});

t.test('a line that is not an assignment names the file and line but not the content', async (t) => {
  t.throws(() => parseEnvFile('A=1\nsecret-value-here\n', 'dev.env'), new EnvFileError('dev.env:2: expected KEY=VALUE'));
});

t.test('figures read as a person would say them', async (t) => {
  t.equal(formatBytes(0), '0 B');
  t.equal(formatBytes(1536), '1.5 KiB');
  t.equal(formatBytes(5 * 1024 ** 3), '5.0 GiB');
  t.equal(formatBytes(null), '-');
  t.equal(formatRatio(0.0123), '1.2%');
  t.equal(formatRatio(undefined), '-');
  const now = new Date('2030-01-01T12:00:00Z');
  t.equal(formatAge(null, now), 'never');
  t.equal(formatAge('2030-01-01T11:59:48Z', now), '12s ago');
  t.equal(formatAge('2030-01-01T11:57:00Z', now), '3m ago');
  t.equal(formatAge('2030-01-01T07:00:00Z', now), '5h ago');
  t.equal(formatAge('2029-12-30T12:00:00Z', now), '2d ago');
  t.equal(formatAge('2030-01-01T12:00:05Z', now), '0s ago', 'a node clock slightly ahead is not "in the future"');
});

t.test('the node table aligns its columns and shows live figures', async (t) => {
  const node = (over: Partial<NodeView>): NodeView => ({
    id: '00000000-0000-0000-0000-000000000000', name: 'n', region: null, surfaces: ['model'], installDir: null,
    address: 'a', controlPlaneUrl: 'https://cp', hasCa: false, spoolQuotaGb: 10, spoolFullPolicy: 'reject', replicas: 1,
    status: 'pending', version: null, protocolVersion: null, configVersionsBehind: null, lastHeartbeatAt: null,
    requests5m: 0, errorRate5m: 0, backfillBacklog: 0, spoolBytes: 0, onboardingStage: null, hostname: null, arch: null,
    enrolledAt: null, createdAt: '2030-01-01T00:00:00Z', ...over,
  });
  const now = new Date('2030-01-01T12:00:00Z');
  const table = renderNodeTable([
    node({ name: 'edge-sh-01', status: 'online', version: '0.1.0', configVersionsBehind: 0, lastHeartbeatAt: '2030-01-01T11:59:55Z', requests5m: 1234, errorRate5m: 0.005, backfillBacklog: 12, spoolBytes: 2 * 1024 * 1024 }),
    node({ name: 'edge-2' }),
  ], now);
  t.equal(table, [
    'NAME        STATUS   VERSION  CONFIG BEHIND  LAST HEARTBEAT  REQ 5M  ERR 5M  BACKLOG    SPOOL',
    'edge-sh-01  online   0.1.0                0  5s ago            1234    0.5%       12  2.0 MiB',
    'edge-2      pending  -                    -  never                0    0.0%        0      0 B',
    '',
  ].join('\n'));
});

t.test('the CA file a generated command refers to is found in it', async (t) => {
  t.equal(caFileInCommand('zenova install node --package p --control-plane https://x --token t --ca-file zenova-control-plane-ca.pem --install-dir /a/b'), 'zenova-control-plane-ca.pem');
  t.equal(caFileInCommand('zenova install node --package p --control-plane https://x --token t'), undefined);
});

t.test('a node clock off by more than 30 s is pointed out under the table and in the detail', async (t) => {
  const now = new Date('2030-01-01T12:00:00Z');
  const base: NodeView = {
    id: '00000000-0000-0000-0000-000000000000', name: 'edge-a', region: null, surfaces: ['model'], installDir: null,
    address: 'a', controlPlaneUrl: 'https://cp', hasCa: false, spoolQuotaGb: 10, spoolFullPolicy: 'reject', replicas: 1,
    status: 'online', version: '0.1.0', protocolVersion: 1, configVersionsBehind: 0, lastHeartbeatAt: '2030-01-01T11:59:55Z',
    requests5m: 0, errorRate5m: 0, backfillBacklog: 0, spoolBytes: 0, onboardingStage: null, hostname: null, arch: null,
    enrolledAt: null, createdAt: '2030-01-01T00:00:00Z', clockSkewMs: -212,
  };
  const table = renderNodeTable([base, { ...base, name: 'edge-b', clockSkewMs: -240_000 }, { ...base, name: 'edge-c', clockSkewMs: 7_300_000 }], now);
  t.notMatch(table, /edge-a's clock/, 'a skew within 30 s gets no note');
  t.match(table, "note: node edge-b's clock is 4 min 0 s behind the control plane's; sync its host clock (NTP).");
  t.match(table, "note: node edge-c's clock is 2 h 1 min ahead of the control plane's");
  t.notMatch(renderNodeTable([base], now), /note:/);
  t.match(renderNodeDetail(base, now), /clock skew\s+-212 ms\n/);
  t.match(renderNodeDetail({ ...base, clockSkewMs: 31_000 }, now), /clock skew\s+\+31\.0 s {2}\(beyond ±30 s: sync this host's clock\)/);
  t.match(renderNodeDetail({ ...base, clockSkewMs: null }, now), /clock skew\s+not measured yet/);
  t.equal(formatSkew(undefined), '-');
  t.equal(formatSkew(-999.6), '-1.0 s');
});

t.test("a node's config error is shown in the detail with its code, version, time and message, and noted under the table", async (t) => {
  const now = new Date('2030-01-01T12:00:00Z');
  const base: NodeView = {
    id: '00000000-0000-0000-0000-000000000000', name: 'edge-a', region: null, surfaces: ['model'], installDir: null,
    address: 'a', controlPlaneUrl: 'https://cp', hasCa: false, spoolQuotaGb: 10, spoolFullPolicy: 'reject', replicas: 1,
    status: 'online', version: '0.1.0', protocolVersion: 1, configVersionsBehind: 0, appliedConfigVersion: 43, configError: null,
    lastHeartbeatAt: '2030-01-01T11:59:55Z', requests5m: 0, errorRate5m: 0, backfillBacklog: 0, spoolBytes: 0, onboardingStage: null,
    hostname: null, arch: null, enrolledAt: null, createdAt: '2030-01-01T00:00:00Z', clockSkewMs: 0,
  };
  const behind: NodeView = {
    ...base, name: 'edge-b', configVersionsBehind: 3, appliedConfigVersion: 40,
    configError: { version: 43, code: 'CONFIG_BAD_SIGNATURE', message: 'the bundle signature does not verify\nwith key k1', at: '2030-01-01T11:58:00Z' },
  };
  const detail = renderNodeDetail(behind, now);
  t.match(detail, /\n {2}config applied {4}version 40\n {2}config behind {5}3\n/);
  t.match(detail, /\n {2}config error {6}CONFIG_BAD_SIGNATURE for version 43, 2030-01-01T11:58:00Z \(2m ago\): the bundle signature does not verify with key k1\n/,
    'on one line: a newline in the message does not break the rows');
  t.match(renderNodeDetail(base, now), /config applied {4}version 43\n.*\n {2}config error {6}none\n/);
  t.match(renderNodeDetail({ ...base, appliedConfigVersion: null }, now), /config applied {4}none yet\n/);
  const older: NodeView = { ...base };
  delete older.appliedConfigVersion;
  delete older.configError;
  t.match(renderNodeDetail(older, now), /config applied {4}-\n.*\n {2}config error {6}-\n/, 'a control plane that reports neither');

  const table = renderNodeTable([base, behind], now);
  t.match(table, '\nnote: node edge-b did not apply config version 43 (CONFIG_BAD_SIGNATURE) and keeps serving its last good config; see why: zenova gateway-node show edge-b\n');
  t.notMatch(table, /node edge-a did not/, 'a node without a config error gets no note');
  t.notMatch(renderNodeTable([base], now), /note:/);
});

t.test("a node's host CPU is shown by the package's name (x86_64, aarch64), whatever name the node reported", async (t) => {
  const now = new Date('2030-01-01T12:00:00Z');
  const base: NodeView = {
    id: '00000000-0000-0000-0000-000000000000', name: 'edge-a', region: null, surfaces: ['model'], installDir: null,
    address: 'a', controlPlaneUrl: 'https://cp', hasCa: false, spoolQuotaGb: 10, spoolFullPolicy: 'reject', replicas: 1,
    status: 'online', version: '0.1.0', protocolVersion: 1, configVersionsBehind: 0, lastHeartbeatAt: '2030-01-01T11:59:55Z',
    requests5m: 0, errorRate5m: 0, backfillBacklog: 0, spoolBytes: 0, onboardingStage: null, hostname: 'sh-gw-01', arch: 'x64',
    enrolledAt: '2030-01-01T00:00:00Z', createdAt: '2030-01-01T00:00:00Z',
  };
  for (const [reported, shown] of [['x64', 'x86_64'], ['arm64', 'aarch64'], ['x86_64', 'x86_64'], ['aarch64', 'aarch64'], ['mips', 'mips']]) {
    t.match(renderNodeDetail({ ...base, arch: reported }, now), new RegExp(`\\n {2}host {14}sh-gw-01 \\(${shown}\\)\\n`), `${reported} → ${shown}`);
  }
  t.match(renderNodeDetail({ ...base, arch: null }, now), /\n {2}host {14}sh-gw-01\n/, 'no arch reported: the host name alone');
});
