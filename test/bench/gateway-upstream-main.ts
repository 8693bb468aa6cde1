/**
 * The bench's upstream as its own process (so it never shares the load generator's or a gateway's
 * event loop): the demo upstream (fast, fixed, non-streaming answers) on 127.0.0.1:0. Prints one
 * JSON line `{"msg":"bench upstream listening","url":…,"port":…}`; stops on SIGTERM.
 */
import { createDemoUpstream } from '../../control-plane/src/dev-stack/demo-upstream.js';

const upstream = createDemoUpstream({ logRequests: false });
const { url, port } = await upstream.listen(0, '127.0.0.1');
process.stdout.write(`${JSON.stringify({ msg: 'bench upstream listening', url, port })}\n`);
const stop = (): void => {
  void upstream.close().finally(() => process.exit(0));
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
