// A reservation the lease book wrote for a request whose spool row never committed (the node killed
// -9 between the preauthorise stage and the row's group commit) is released when the node starts
// again: nothing went upstream for it, and no record will ever carry it back. Every other reservation
// of a dead process still counts as spent — one whose open row committed (its interrupted record
// carries it and the control plane writes it off), one that went upstream whose record was already
// delivered and deleted — and a replica still serving keeps its own. Real parts: a child process
// opens the services `serve` opens and is killed with SIGKILL; the restart opens them on the same
// state dir (real SQLite files). A reservation whose request's final record committed while the
// lease's charge never came is charged that record's cost at restart, the rest released (the control
// plane charges the same cost and returns nothing for it); one already charged is not charged again.
import { Writable } from 'node:stream';
import t from 'tap';
import type { Test } from 'tap';
import { createLogger } from '../../../edge-node/src/logger.js';
import type { Logger } from '../../../edge-node/src/logger.js';
import { SPOOL_FILE } from '../../../edge-node/src/spool/spool-file.js';
import { startProcess, tsEntry } from '../../fixtures/processes.js';
import type { StartedProcess } from '../../fixtures/processes.js';
import { spoolState, tempStateDir } from '../spool/spool-helpers.js';
import { GRANTED, leaseBookOnDisk, openNode, pricedRequest } from './left-reservations-node.js';

const RELEASED_LINE = /released the reservation of a request the previous run stopped before it reached the spool/;
const CHARGED_LINE = /charged the reservation of a request the previous run recorded but stopped before charging/;

/** A logger whose JSON lines the test reads back. */
function capturingLogger(): { logger: Logger; lines: Array<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = [];
  const destination = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString('utf8').split('\n')) if (line.trim() !== '') lines.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
  return { logger: createLogger({ level: 'info', destination }), lines };
}

/** The stand-in node, started on `dir` and ready (its reservations written). */
async function startChild(t: Test, dir: string, mode: 'crash-state' | 'live-replica' | 'recorded-uncharged'): Promise<StartedProcess> {
  const entry = tsEntry('test/edge-node/billing/left-reservations-child.ts');
  return startProcess({ t, name: `left-reservations-${mode}`, command: entry.command, args: [...entry.args, dir, mode], readyLine: /^ready$/ });
}

/** Whether a request reserving `micros` is admitted by the started node (its reservation then given back). */
function admits(services: Awaited<ReturnType<typeof openNode>>, micros: number): boolean {
  const ctx = pricedRequest(`req-probe-${micros}`, micros);
  const refused = services.pipeline.credit.preauthorise(ctx);
  for (const cleanup of ctx.cleanups) cleanup();
  return refused === undefined;
}

t.test('a reservation whose request was killed before its open row committed is released at restart; the others stay spent', async (t) => {
  const dir = tempStateDir(t);
  const child = await startChild(t, dir, 'crash-state');
  await child.kill9();

  const before = leaseBookOnDisk(dir);
  t.equal(before.spent, 20_000, 'the settled request was charged its cost');
  t.equal(before.reserved, 70_000 + 90_000 + 110_000, 'three reservations were held when the node died');
  t.same(before.reservations, [
    { requestId: 'req-delivered', amount: 90_000, forwarded: 1 },
    { requestId: 'req-open', amount: 70_000, forwarded: 0 },
    { requestId: 'req-unopened', amount: 110_000, forwarded: 0 },
  ]);

  const { logger, lines } = capturingLogger();
  const services = await openNode(dir, logger);

  const after = leaseBookOnDisk(dir);
  t.equal(after.spent, 20_000 + 70_000 + 90_000, 'the open and the delivered reservations count as spent; the unopened one is released');
  t.equal(after.reserved, 0);
  t.same(after.reservations, [], 'every reservation of the dead process is settled on disk');
  const spool = spoolState(`${dir}/${SPOOL_FILE}`);
  t.same(spool.open, []);
  t.same(
    spool.records.filter((r) => r.status === 'interrupted'),
    [{ id: 'req-open', status: 'interrupted', reservedMicros: 70_000 }],
    'the request with an open row is an interrupted record carrying its reservation (the control plane writes it off)',
  );
  t.notOk(spool.records.some((r) => r.id === 'req-unopened'), 'the released request has no record');

  const released = lines.filter((l) => RELEASED_LINE.test(String(l.msg)));
  t.equal(released.length, 1, 'the release is logged once');
  t.match(released[0], { requestId: 'req-unopened', reservedMicros: 110_000, leaseId: 'lease-left-1' });

  const available = GRANTED - after.spent;
  t.ok(admits(services, available), 'the released credit can be reserved again');
  t.notOk(admits(services, available + 1), 'and no more than that');

  // A second start decides nothing again: the rows are gone and the figures stay.
  await services.close();
  const again = capturingLogger();
  const restarted = await openNode(dir, again.logger);
  t.teardown(() => restarted.close());
  t.equal(leaseBookOnDisk(dir).spent, after.spent);
  t.notOk(again.lines.some((l) => RELEASED_LINE.test(String(l.msg))), 'nothing is released twice');
});

t.test("a starting replica leaves a live replica's unopened reservation alone, and releases it once that replica is gone", async (t) => {
  const dir = tempStateDir(t);
  const replica = await startChild(t, dir, 'live-replica');

  const first = capturingLogger();
  const beside = await openNode(dir, first.logger);
  t.same(
    leaseBookOnDisk(dir).reservations.map((r) => r.requestId),
    ['req-live-unopened'],
    "the live replica's reservation row is kept for it",
  );
  t.notOk(first.lines.some((l) => RELEASED_LINE.test(String(l.msg))), 'nothing of the live replica is released');
  await beside.close();

  await replica.kill9();
  const { logger, lines } = capturingLogger();
  const restarted = await openNode(dir, logger);
  t.teardown(() => restarted.close());
  t.same(leaseBookOnDisk(dir).reservations, [], 'once that replica is gone its reservation is settled');
  t.match(lines.filter((l) => RELEASED_LINE.test(String(l.msg))), [{ requestId: 'req-live-unopened', reservedMicros: 110_000 }]);
  t.equal(leaseBookOnDisk(dir).spent, 0, 'and released: it never reached the spool');
  t.ok(admits(restarted, GRANTED), 'the whole lease can be reserved again');
});

t.test("a reservation whose request's record committed but whose charge never came is charged the record's cost at restart, the rest released, and a charged one is not charged again", async (t) => {
  const dir = tempStateDir(t);
  const child = await startChild(t, dir, 'recorded-uncharged');
  await child.kill9();

  const before = leaseBookOnDisk(dir);
  t.equal(before.spent, 20_000, 'the charged request was charged its cost, once');
  t.equal(before.reserved, 60_000 + 10_000 + 40_000, 'three reservations were held when the node died');
  t.same(before.reservations, [
    { requestId: 'req-recorded', amount: 60_000, forwarded: 1 },
    { requestId: 'req-recorded-failed', amount: 40_000, forwarded: 1 },
    { requestId: 'req-recorded-over', amount: 10_000, forwarded: 1 },
  ], 'the charge removed its own row; the uncharged ones keep theirs');
  t.same(
    spoolState(`${dir}/${SPOOL_FILE}`).records.map((r) => [r.id, r.status]),
    [['req-charged', 'ok'], ['req-recorded', 'ok'], ['req-recorded-failed', 'failed'], ['req-recorded-over', 'ok']],
    'every request has its final record in the spool (none delivered yet)',
  );

  const { logger, lines } = capturingLogger();
  const services = await openNode(dir, logger);

  const after = leaseBookOnDisk(dir);
  t.equal(
    after.spent,
    20_000 + 25_000 + 15_000 + 0,
    "each uncharged reservation is charged its record's cost (one above its reservation in full, the failed one nothing), not the reservation",
  );
  t.equal(after.reserved, 0);
  t.same(after.reservations, [], 'every reservation of the dead process is settled on disk');
  t.match(
    lines.filter((l) => CHARGED_LINE.test(String(l.msg))).sort((a, b) => String(a.requestId).localeCompare(String(b.requestId))),
    [
      { requestId: 'req-recorded', reservedMicros: 60_000, costMicros: 25_000, releasedMicros: 35_000, leaseId: 'lease-left-1' },
      { requestId: 'req-recorded-failed', reservedMicros: 40_000, costMicros: 0, releasedMicros: 40_000 },
      { requestId: 'req-recorded-over', reservedMicros: 10_000, costMicros: 15_000, releasedMicros: 0 },
    ],
    'each charge is logged once',
  );
  t.equal(lines.filter((l) => CHARGED_LINE.test(String(l.msg))).length, 3);

  const available = GRANTED - after.spent;
  t.ok(admits(services, available), 'what the records did not cost can be reserved again');
  t.notOk(admits(services, available + 1), 'and no more than that');

  // The records are still in the spool, but their rows are gone: a second start charges nothing again.
  await services.close();
  const again = capturingLogger();
  const restarted = await openNode(dir, again.logger);
  t.teardown(() => restarted.close());
  t.equal(spoolState(`${dir}/${SPOOL_FILE}`).records.length, 4, 'the records are still undelivered');
  t.equal(leaseBookOnDisk(dir).spent, after.spent, 'nothing is charged twice');
  t.notOk(again.lines.some((l) => CHARGED_LINE.test(String(l.msg))));
});
