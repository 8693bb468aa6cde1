// Stands in for node-edge in spool-owner-pidns.test.ts, run in its own pid namespace (as a container
// runs it): opens the spool, opens one request row and waits until it is durable (the upstream call
// may now go), writes `ready-<id>`, then serves on until the test kills it with SIGKILL. It keeps
// no reference to its store and runs a full garbage collection (the test starts it with
// --expose-gc) before it says ready: the owner slot must outlive its last reference.
import { renameSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { SpoolStore } from '../../../edge-node/src/spool/spool-store.js';
import { NODE_ID, openRow, quietLogger } from './spool-helpers.js';

const [file, id] = [process.argv[2] ?? '', process.argv[3] ?? 'req-1'];
const store = new SpoolStore({ file, meta: { nodeId: NODE_ID, spoolId: 'x', formatVersion: 1, createdAt: '' }, logger: quietLogger(), limits: () => ({ quotaBytes: 1024 ** 3, fullPolicy: 'reject' }) });
await store.open(openRow(id));
// After this module's evaluation has ended, so nothing but the lock registry holds the store's slot.
setTimeout(() => {
  (globalThis as { gc?: () => void }).gc?.();
  // Renamed into place: the test reads it as soon as it exists.
  const ready = path.join(path.dirname(file), `ready-${id}`);
  writeFileSync(`${ready}.tmp`, String(process.pid));
  renameSync(`${ready}.tmp`, ready);
}, 50);
setInterval(() => undefined, 60_000);
