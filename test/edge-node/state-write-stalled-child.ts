// Child process of state-temp-sweep.test.ts: a node-edge replica caught between writing the temp
// files of control-status.json and spool.json and renaming them (its renames never return), as a
// crash would leave it. Says 'written' once both temp files are complete; the test then kills it
// (a crash mid-write) or keeps it running (another replica's write in progress).
import fsp from 'node:fs/promises';
import { syncBuiltinESMExports } from 'node:module';

const stateDir = process.argv[2] ?? '';
let stalled = 0;
fsp.rename = async () => {
  stalled += 1;
  if (stalled === 2) process.send?.('written');
  return new Promise<void>(() => undefined);
};
syncBuiltinESMExports();

const { openStateStore } = await import('../../edge-node/src/state/state-store.js');
const { saveControlStatus } = await import('../../edge-node/src/control/control-status.js');
const { saveSpoolMarker } = await import('../../edge-node/src/spool/spool-marker.js');
const store = await openStateStore(stateDir, { create: false });
const now = new Date().toISOString();
void saveControlStatus(store, { connected: false, since: now, lastError: null, sessionId: null, pid: process.pid, serving: true, updatedAt: now });
void saveSpoolMarker(store, { nodeId: 'node-under-test', spoolId: 'spool-1', formatVersion: 1, createdAt: now }, 7);
// Alive until the test kills it (an IPC channel without a 'message' listener does not keep it).
setInterval(() => undefined, 60_000);
