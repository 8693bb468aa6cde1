// Stands in for node-edge in spool-status-race.test.ts: opens the spool (writes `ready`), waits for
// `go`, finalises N records (each one committed, i.e. its answer sent), writes `resolved` and
// kills itself with SIGKILL before any checkpoint or close.
import { existsSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { SpoolStore } from '../../../edge-node/src/spool/spool-store.js';
import { NODE_ID, quietLogger, record } from './spool-helpers.js';

const [file, n] = [process.argv[2] ?? '', Number(process.argv[3])];
const dir = path.dirname(file);
const store = new SpoolStore({ file, meta: { nodeId: NODE_ID, spoolId: 'x', formatVersion: 1, createdAt: '' }, logger: quietLogger(), limits: () => ({ quotaBytes: 1024 ** 3, fullPolicy: 'reject' }) });
writeFileSync(path.join(dir, 'ready'), '1');
const poll = setInterval(() => {
  if (!existsSync(path.join(dir, 'go'))) return;
  clearInterval(poll);
  void Promise.all(Array.from({ length: n }, (_, i) => store.finalise(record(`race-${i}`)))).then(() => {
    writeFileSync(path.join(dir, 'resolved'), String(n));
    process.kill(process.pid, 'SIGKILL');
  });
}, 5);
