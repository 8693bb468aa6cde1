// Stands in for a node-edge killed -9 mid-request (spool-full-disk-start.test.ts): opens the spool
// as `serve` does (openNodeSpool, through the replicas' open lock), opens one request row, waits
// until it is durable, then kills itself with SIGKILL, leaving spool.db's -wal and -shm behind.
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { openNodeSpool } from '../../../edge-node/src/spool/open-node-spool.js';
import { NODE_ID, openRow, quietLogger } from './spool-helpers.js';

const stateDir = process.argv[2] ?? '';
const node = await openNodeSpool({ stateDir, nodeId: NODE_ID, holder: ConfigHolder.notReady('crash-child'), logger: quietLogger(), synchronous: 'normal', replicas: 1 });
await node.spool.open(openRow('req-in-flight'));
process.kill(process.pid, 'SIGKILL');
