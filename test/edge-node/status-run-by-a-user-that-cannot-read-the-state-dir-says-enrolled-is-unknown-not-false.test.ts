/**
 * `zenova-node status` run by a user that may not read an enrolled node's state dir (root's 0700
 * dir, status as uid 65534; or, not as root, this user's dir at mode 000) cannot tell whether the
 * node is enrolled: `--json` says `enrolled: null` (never false: a monitor would take the node for
 * unenrolled) with the full report's fields, `error` naming the permission problem and `advice` to
 * run it as the node's user or root; the text says it cannot read the state dir, not "not
 * enrolled". A state dir that does not exist gives the full report's fields too (`enrolled: false`).
 */
import { chmod } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { runNodeCli, runNodeCliAsAnotherUser } from './cli-capture.js';
import { startFakeGateway, writeEnrolledState } from './control-fixtures.js';

/** The keys of an object and of its `control` object, sorted: the shape a monitor reads. */
function shape(report: Record<string, unknown>): { top: string[]; control: string[] } {
  return { top: Object.keys(report).sort(), control: Object.keys(report.control ?? {}).sort() };
}

t.test('status as a user that may not read the state dir: enrolled null, the full report\'s fields, advice to run it as the node\'s user or root', async (t) => {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(t.testdir({}), gateway);
  await chmod(state.dir, 0o700);
  const healthy = await runNodeCli(['status', '--state-dir', state.dir, '--json']);
  t.equal(healthy.code, 0, healthy.stderr);
  const full = shape(JSON.parse(healthy.stdout) as Record<string, unknown>);

  const json = await runNodeCliAsAnotherUser(t, state.dir, 0o000, ['status', '--state-dir', state.dir, '--json']);
  t.equal(json.code, 1, json.stderr);
  const report = JSON.parse(json.stdout) as Record<string, unknown>;
  t.equal(report.enrolled, null, 'enrolled is unknown, not false');
  t.match(report.error, /identity\.json: permission denied/);
  t.match(report.advice, /as the node's user or as root/);
  t.same(shape(report), { top: [...full.top, 'advice', 'error'].sort(), control: full.control }, 'every field of the full report, and error and advice');
  t.same([report.node, report.credential, report.config, report.spool, (report.control as Record<string, unknown>).connected], [null, null, null, null, null], 'unknown fields are null');

  const text = await runNodeCliAsAnotherUser(t, state.dir, 0o000, ['status', '--state-dir', state.dir]);
  t.equal(text.code, 1, text.stderr);
  t.match(text.stderr, `zenova-node: cannot read the state dir ${state.dir}: `);
  t.match(text.stderr, /what to do: run `zenova-node status` as the node's user or as root/);
  t.notMatch(text.stdout + text.stderr, /not enrolled|zenova-node enroll|re-?enroll/i, 'never said to be, or to be made, enrolled');
});

t.test('status --json of a state dir that does not exist gives the full report\'s fields, enrolled false', async (t) => {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(t.testdir({}), gateway);
  const full = shape(JSON.parse((await runNodeCli(['status', '--state-dir', state.dir, '--json'])).stdout) as Record<string, unknown>);
  const missing = await runNodeCli(['status', '--state-dir', path.join(state.dir, 'absent'), '--json']);
  t.equal(missing.code, 1);
  const report = JSON.parse(missing.stdout) as Record<string, unknown>;
  t.equal(report.enrolled, false);
  t.match(report.error, /does not exist/);
  t.same(shape(report), { top: [...full.top, 'error'].sort(), control: full.control });
});
