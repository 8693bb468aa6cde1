/**
 * `zenova logs COMPONENT --since T`: a T journalctl cannot read is a usage error (exit 2, the
 * `zenova:` prefix, naming --since and the value) before journalctl runs, not journalctl's own
 * "Failed to parse timestamp" and exit 1; every form docs/install.md and the help name still
 * reaches journalctl unchanged. The service manager is the fake one: no journal is needed.
 */
import t from 'tap';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LOGS_USAGE, runLogs, sinceProblem } from '../../installer/src/commands/logs.js';
import { UsageError } from '../../installer/src/cli-context.js';
import { captureCli, fakeServices, hostEnv } from './fake-host.js';

const root = mkdtempSync(join(tmpdir(), 'zn-logs-since-'));
t.teardown(() => rmSync(root, { recursive: true, force: true }));
const unitDir = join(root, 'etc/systemd/system');
mkdirSync(unitDir, { recursive: true });
writeFileSync(join(unitDir, 'node-edge.service'), '[Service]\nEnvironmentFile=/opt/zenova-node/etc/node.env\n');

/** Values journalctl (systemd.time(7)) reads, as docs/install.md and `zenova logs --help` show them and beyond. */
const READ_BY_JOURNALCTL = [
  'now', 'today', 'yesterday', 'tomorrow', 'today UTC',
  '-1h', '+1h', '-30min', '- 1h', '-1.5h', '-1 hour', '30 min ago', '2 hours ago', '1h 30min ago', '1h30min ago', '5s500ms ago',
  '1 hour left', '3 days ago', '1w ago', '1M ago', '1y ago', '90 ago', '1 usec ago',
  '2026-11-29', '26-11-29', '2026-1-2', '2026-11-29 08:00', '2026-11-29 8:5', '2026-11-29 08:00:01', '2026-11-29 08:00:01.123',
  '2026-11-29 08:00:00 UTC', 'Fri 2026-11-27', 'friday 2026-11-27 08:00', '08:00', '08:00:00',
  // journalctl's own short timestamps, as an operator copies them from its output.
  'Nov 29 08:00:00', 'Nov 29 08:00:00.123456', 'nov 29 08:00:00', 'Sun Nov 29 08:00:00', 'Nov  2 08:00:00',
  // Seconds since the epoch, and a named zone as an operator in China writes one.
  '@1700000000', '@1700000000.5', '2026-12-06 08:00 Asia/Shanghai', '2026-12-06 08:00 America/Argentina/Buenos_Aires',
];
/** Values journalctl refuses with "Failed to parse timestamp" (checked against journalctl 252). */
const REFUSED_BY_JOURNALCTL = [
  'yesterdya', 'TODAY', 'Now', 'now UTC', 'today +2days', '30 mins ago', '1hrs ago', '1 MIN ago', 'ago', '12 ago 3',
  '5.5.5 ago', '. ago', '5. ago', '+', '-', '2026-13-01', '2026-11-29 25:00', '08:60', '1969-01-01', '2026-11-29 08:00:00.',
  '2026-11-29 08:00 +0200', '1700000000', '@', '@abc', '2026-12-06 08:00 /etc', 'Asia/Shanghai', 'Fri 08:00', 'last tuesday', 'Nov 29 08:00', 'Nov 29', 'Nov 32 08:00:00', 'Foo 29 08:00:00',
];

t.test('every --since value docs/install.md and the help show is one the check lets through', async (t) => {
  const documented = [
    ...[...readFileSync(new URL('../../docs/install.md', import.meta.url), 'utf8').matchAll(/--since '([^']+)'/g)].map((m) => m[1] ?? ''),
    ...[...(/--since T +e\.g\. (.*)$/m.exec(LOGS_USAGE)?.[1] ?? '').matchAll(/'([^']+)'|([^\s,']+)/g)].map((m) => m[1] ?? m[2] ?? ''),
  ];
  t.ok(documented.length >= 6, `found the documented examples: ${documented.join(' | ')}`);
  for (const value of documented) t.equal(sinceProblem(value), undefined, `${value} accepted`);
});

t.test('the forms journalctl reads are accepted and handed to journalctl as given', async (t) => {
  for (const value of READ_BY_JOURNALCTL) t.equal(sinceProblem(value), undefined, `${value} accepted`);
  const services = fakeServices(root);
  t.equal(await runLogs(['node-edge', '--since', '1h 30min ago'], captureCli(root).ctx, hostEnv(root, { services })), 0);
  t.same(services.calls, ['journal node-edge.service {"since":"1h 30min ago"}']);
});

t.test('a value journalctl cannot read is a usage error naming --since and the value, and journalctl never runs', async (t) => {
  for (const value of REFUSED_BY_JOURNALCTL) t.match(sinceProblem(value), /is not a time journalctl reads; use e\.g\. '30 min ago'/, `${value} refused`);
  const services = fakeServices(root);
  const err = await runLogs(['node-edge', '--since', 'yesterdya'], captureCli(root).ctx, hostEnv(root, { services })).then(() => undefined, (e: unknown) => e);
  t.ok(err instanceof UsageError, 'a UsageError: exit 2 with the zenova: prefix and the help pointer');
  t.match((err as Error).message, /^--since "yesterdya" is not a time journalctl reads; use e\.g\. '30 min ago', '2 hours ago', -1h, today, yesterday, '2026-11-29 08:00'/);
  t.equal((err as UsageError).helpCommand, 'logs');
  t.same(services.calls, [], 'journalctl was not run');
});
