// `zenova-node serve` reads its settings from the environment before it opens anything: a bad value
// is one line naming the variable and what it accepts, exit 2, with no spool or lease book created
// in the state dir; a typo is refused rather than taken as the default.
import { existsSync } from 'node:fs';
import { readFile, readdir } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { DEFAULT_CREDIT_POLICY } from '../../edge-node/src/billing/credit-policy.js';
import { SERVE_USAGE } from '../../edge-node/src/cli/args.js';
import { ServeSettingError, readServeSettings } from '../../edge-node/src/cli/serve-settings.js';
import { startProcess, tsEntry } from '../fixtures/processes.js';
import { createTestCa } from '../fixtures/tls.js';
import { writeEnrolledState } from './control-fixtures.js';

const MAIN = 'edge-node/src/main.ts';
const LISTENING = /"msg":"node-edge listening"/;
// What serve opens in the state dir once its settings are read.
const OPENED_FILES = ['spool.db', 'spool.json', 'credit-leases.sqlite'];

/** Runs serve on an enrolled state dir with `env`; a node that starts listening is stopped and reported. */
async function serveOnce(t: Test, stateDir: string, env: NodeJS.ProcessEnv): Promise<{ code: number | null; listened: boolean; lines: string[] }> {
  const entry = tsEntry(MAIN);
  const node = await startProcess({
    name: 'zenova-node',
    command: entry.command,
    args: [...entry.args, 'serve', '--state-dir', stateDir, '--listen', '127.0.0.1:0'],
    env,
    t,
  });
  const listened = await node.waitForLine(LISTENING, 30_000).then(
    () => true,
    (err: Error) => {
      if (/timed out/.test(err.message)) throw err;
      return false; // it exited first
    },
  );
  if (listened) await node.stop();
  const { code } = await node.exited;
  // The JSON log lines aside, what an operator reads.
  const lines = node.output().split('\n').filter((line) => line.trim() !== '' && !line.startsWith('{'));
  return { code, listened, lines };
}

t.test('a bad node setting stops serve with exit 2 and one line naming the variable and its accepted values, before the spool or lease book is opened', async (t) => {
  const ca = await createTestCa();
  const cases: Array<[string, string, RegExp]> = [
    ['ZENOVA_DEFAULT_MAX_OUTPUT_TOKENS', 'abc', /^zenova-node: ZENOVA_DEFAULT_MAX_OUTPUT_TOKENS must be a whole number from 1 to 1000000, got a value that is not one \(not shown: it does not look like a number\)$/],
    ['ZENOVA_LEASE_REPORT_MS', '0', /^zenova-node: ZENOVA_LEASE_REPORT_MS must be a whole number from 1 to 3600000, got "0"$/],
    ['ZENOVA_SPOOL_SYNCHRONOUS', 'ful', /^zenova-node: ZENOVA_SPOOL_SYNCHRONOUS must be normal or full, got "ful"$/],
    ['ZENOVA_NODE_LINK_LOCK_INTERVAL_MS', '10', /^zenova-node: ZENOVA_NODE_LINK_LOCK_INTERVAL_MS must be a whole number from 50 to 60000, got "10"$/],
    ['ZENOVA_NODE_REPLICAS', 'abc', /^zenova-node: ZENOVA_NODE_REPLICAS must be a whole number from 1 to 999, got a value that is not one \(not shown: it does not look like a number\)$/],
    ['ZENOVA_NODE_REPLICAS', '0', /^zenova-node: ZENOVA_NODE_REPLICAS must be a whole number from 1 to 999, got "0"$/],
  ];
  for (const [name, value, refusal] of cases) {
    await t.test(`${name}=${value}`, async (t) => {
      // Nothing dials it: serve stops before its control link starts.
      const state = await writeEnrolledState(path.join(t.testdir({}), 'state'), { target: '127.0.0.1:9', ca });
      const { code, listened, lines } = await serveOnce(t, state.dir, { [name]: value });
      t.notOk(listened, 'never serves');
      t.equal(code, 2);
      t.equal(lines.length, 1, `one line: ${JSON.stringify(lines)}`);
      t.match(lines[0], refusal);
      for (const file of OPENED_FILES) t.notOk(existsSync(path.join(state.dir, file)), `${file} was not created`);
    });
  }
});

t.test('the node settings default to what docs/node-api.md says, and empty counts as unset', async (t) => {
  const expected = { credit: DEFAULT_CREDIT_POLICY, spoolSynchronous: 'normal', linkLockIntervalMs: undefined, shutdownDrainMs: undefined };
  t.match(readServeSettings({}, { enrolled: true }), expected);
  t.match(readServeSettings({ ZENOVA_DEFAULT_MAX_OUTPUT_TOKENS: '', ZENOVA_LEASE_REPORT_MS: '', ZENOVA_SPOOL_SYNCHRONOUS: '', ZENOVA_NODE_LINK_LOCK_INTERVAL_MS: '', ZENOVA_NODE_SHUTDOWN_DRAIN_MS: '' }, { enrolled: true }), expected);
  t.same(DEFAULT_CREDIT_POLICY, { defaultMaxOutputTokens: 4096, reportIntervalMs: 5000 });
  t.equal(readServeSettings({}, { enrolled: false }).reconnect, undefined, 'a stand-alone node has no control link to tune');
});

t.test('the node settings take the documented ranges, ends included, and the spool mode in any case', async (t) => {
  const low = readServeSettings({ ZENOVA_DEFAULT_MAX_OUTPUT_TOKENS: '1', ZENOVA_LEASE_REPORT_MS: '1', ZENOVA_SPOOL_SYNCHRONOUS: 'FULL', ZENOVA_NODE_LINK_LOCK_INTERVAL_MS: '50', ZENOVA_NODE_SHUTDOWN_DRAIN_MS: '0' }, { enrolled: true });
  t.same(low.credit, { defaultMaxOutputTokens: 1, reportIntervalMs: 1 });
  t.equal(low.spoolSynchronous, 'full');
  t.equal(low.linkLockIntervalMs, 50);
  t.equal(low.shutdownDrainMs, 0);
  const high = readServeSettings({ ZENOVA_DEFAULT_MAX_OUTPUT_TOKENS: '1000000', ZENOVA_LEASE_REPORT_MS: '3600000', ZENOVA_SPOOL_SYNCHRONOUS: 'Normal', ZENOVA_NODE_LINK_LOCK_INTERVAL_MS: '60000', ZENOVA_NODE_SHUTDOWN_DRAIN_MS: '20000' }, { enrolled: true });
  t.same(high.credit, { defaultMaxOutputTokens: 1_000_000, reportIntervalMs: 3_600_000 });
  t.equal(high.spoolSynchronous, 'normal');
  t.equal(high.linkLockIntervalMs, 60_000);
  t.equal(high.shutdownDrainMs, 20_000, 'at most 20 s: the unit stops the process after 30');
  for (const [name, value] of [
    ['ZENOVA_DEFAULT_MAX_OUTPUT_TOKENS', '1000001'], ['ZENOVA_DEFAULT_MAX_OUTPUT_TOKENS', '-1'], ['ZENOVA_LEASE_REPORT_MS', '3600001'],
    ['ZENOVA_LEASE_REPORT_MS', '1.5'], ['ZENOVA_NODE_LINK_LOCK_INTERVAL_MS', '60001'], ['ZENOVA_NODE_LINK_LOCK_INTERVAL_MS', '1e3'],
    ['ZENOVA_SPOOL_SYNCHRONOUS', 'off'], ['ZENOVA_SPOOL_SYNCHRONOUS', 'extra'], ['ZENOVA_NODE_SHUTDOWN_DRAIN_MS', '20001'],
  ] as const) {
    t.throws(() => readServeSettings({ [name]: value }, { enrolled: false }), ServeSettingError, `${name}=${value}`);
  }
});

t.test("every ZENOVA_ variable node-edge reads is in `serve --help` and in docs/node-api.md's settings", async (t) => {
  const sources = await readdir(new URL('../../edge-node/src/', import.meta.url), { recursive: true });
  const read = new Set<string>();
  for (const file of sources.filter((f) => f.endsWith('.ts'))) {
    const text = await readFile(new URL(`../../edge-node/src/${file}`, import.meta.url), 'utf8');
    // How the code reads one: env.NAME, env['NAME'], or NAME handed to a reader as a string.
    for (const m of text.matchAll(/env\.(ZENOVA_[A-Z0-9_]+)|'(ZENOVA_[A-Z0-9_]+)'/g)) read.add((m[1] ?? m[2]) as string);
  }
  t.ok(read.size >= 12, `found the variables read: ${[...read].join(', ')}`);
  const docs = await readFile(new URL('../../docs/node-api.md', import.meta.url), 'utf8');
  for (const name of read) {
    t.ok(SERVE_USAGE.includes(name), `${name} in serve --help`);
    t.ok(docs.includes(`| \`${name}\``) || docs.includes(`\`${name}\`, \``) || docs.includes(`, \`${name}\``), `${name} in a row of docs/node-api.md`);
  }
});
