/**
 * `zenova gateway-node delete NAME` needs `--yes` (deleting revokes the node's credentials for
 * good and the command asks no question): the command's help, the gateway-node command list,
 * docs/install.md and the departures in docs/architecture.md all say so, and without it nothing
 * is read or sent. No control plane is needed: the refusal comes before any setting is read.
 */
import t from 'tap';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runCli } from '../../installer/src/cli.js';
import { deleteCommand } from '../../installer/src/commands/gateway-node/delete.js';
import { captureCli } from './fake-host.js';

const cwd = mkdtempSync(join(tmpdir(), 'zn-delete-yes-'));
t.teardown(() => rmSync(cwd, { recursive: true, force: true }));
const installDoc = readFileSync(new URL('../../docs/install.md', import.meta.url), 'utf8');
const architectureDoc = readFileSync(new URL('../../docs/architecture.md', import.meta.url), 'utf8');

/** docs/*.md text with its line breaks folded, so a phrase wrapped across lines still matches. */
const folded = (text: string): string => text.replace(/\s+/g, ' ');

t.test('gateway-node delete --help shows --yes in its synopsis and explains it among the options', async (t) => {
  const cli = captureCli(cwd);
  t.equal(await runCli(['gateway-node', 'delete', '--help'], cli.ctx), 0);
  t.match(cli.out(), /^Usage: zenova gateway-node delete NAME --yes \[--json\]$/m);
  t.match(cli.out(), /^ {2}--yes {2,}Confirm the deletion/m);
  const list = captureCli(cwd);
  t.equal(await runCli(['gateway-node', '--help'], list.ctx), 0);
  t.match(list.out(), /^ {2}delete NAME --yes {2,}Delete a node/m, 'the gateway-node command list shows it too');
});

t.test('docs/install.md shows delete with --yes, as its help writes the synopsis, and says why it is needed', async (t) => {
  const synopsis = /^Usage: zenova (gateway-node delete NAME --yes)/m.exec(deleteCommand.usage)?.[1];
  t.ok(synopsis, 'the help has a synopsis with --yes');
  const doc = folded(installDoc);
  t.ok(doc.includes(`\`zenova ${synopsis ?? '?'}\``), `install.md names \`zenova ${synopsis ?? '?'}\``);
  t.match(doc, /needs `--yes`: deleting revokes the node's credentials .*without `--yes` it is a usage error \(exit 2\) and nothing is sent/);
});

t.test('docs/architecture.md lists --yes among the departures from DESIGN.md, with the reason', async (t) => {
  const departures = folded(architectureDoc.slice(architectureDoc.indexOf('## Departures from DESIGN.md')));
  t.match(departures, /\*\*`zenova gateway-node delete NAME` needs `--yes`\.\*\* DESIGN §12 lists `delete NAME`; deleting revokes the node's credentials/);
});

t.test('delete without --yes is a usage error naming --yes before any connection setting is read', async (t) => {
  const cli = captureCli(cwd);
  // No ZENOVA_* settings at all: were they read first, the error would be that the URL is not set.
  t.equal(await runCli(['gateway-node', 'delete', 'edge-1'], cli.ctx), 2);
  t.match(cli.err(), /^zenova: deleting node edge-1 revokes its credentials and cuts its connection for good; add --yes to confirm\nRun "zenova gateway-node delete --help" for usage\.\n$/);
});
