// A replica for spool-older-copy.test.ts: opens the node's spool in argv[2] as node-edge does (so
// its checkpoints keep spool.json's sequence mark), says `ready`, then finalises records under the
// tag argv[3] without pause until the test kills it -9.
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { openNodeSpool } from '../../../edge-node/src/spool/open-node-spool.js';
import { NODE_ID, quietLogger, record } from './spool-helpers.js';

const [stateDir, tag] = [process.argv[2] ?? '', process.argv[3] ?? 'x'];
const node = await openNodeSpool({ stateDir, nodeId: NODE_ID, holder: ConfigHolder.notReady('child'), logger: quietLogger(), synchronous: 'normal' });
process.stdout.write('ready\n');
for (let i = 0; ; i += 20) {
  await Promise.all(Array.from({ length: 20 }, (_, k) => node.spool.finalise(record(`${tag}-${i + k}`))));
}
