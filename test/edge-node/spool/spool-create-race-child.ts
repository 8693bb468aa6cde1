// A replica starting on a fresh state dir, for spool-create-race.test.ts. argv: stateDir, name, count,
// goFile, delayMs. Loads everything, prints `ready`, waits for goFile (the test writes it once every
// replica is ready, holding an instant a little ahead), spins until that instant plus delayMs (a
// shared clock starts them within microseconds, as the race needs), then opens the node's spool with
// openNodeSpool as `serve` does, finalises `count` records (a pause of 50 ms every 10, so checkpoints
// and the other replica's open fall among them), prints how many were durable and closes the spool.
import { existsSync, readFileSync, writeSync } from 'node:fs';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { openNodeSpool } from '../../../edge-node/src/spool/open-node-spool.js';
import { NODE_ID, quietLogger, record } from './spool-helpers.js';

const [stateDir, name, count, goFile, delayMs] = [process.argv[2], process.argv[3] ?? 'x', Number(process.argv[4] ?? 20), process.argv[5] ?? '', Number(process.argv[6] ?? 0)];
const GO_WAIT_MS = 60_000;
writeSync(1, 'ready\n');
const pause = new Int32Array(new SharedArrayBuffer(4));
for (const deadline = Date.now() + GO_WAIT_MS; !existsSync(goFile); ) {
  if (Date.now() > deadline) throw new Error(`${goFile} never appeared`);
  Atomics.wait(pause, 0, 0, 1);
}
const startAt = Number(readFileSync(goFile, 'utf8')) + delayMs;
while (Date.now() < startAt) {
  // spin: a sleep's wake-up jitter is as long as the race
}
try {
  const spool = await openNodeSpool({ stateDir, nodeId: NODE_ID, holder: ConfigHolder.notReady('test'), logger: quietLogger(), synchronous: 'normal', replicas: 2 });
  let durable = 0;
  for (let i = 0; i < count; i += 1) {
    if (i % 10 === 0) await new Promise((resolve) => setTimeout(resolve, 50));
    await spool.spool.finalise(record(`req_${name}_${i}`));
    durable += 1;
  }
  await spool.close();
  writeSync(1, `${JSON.stringify({ name, durable })}\n`);
} catch (err) {
  writeSync(1, `${JSON.stringify({ name, error: (err as Error).message })}\n`);
}
