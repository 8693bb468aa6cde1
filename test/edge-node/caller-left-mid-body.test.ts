// A caller that disconnects while its body is still arriving is no failure of the node: fastify's
// body reader hands the error handler Node's "aborted" (ECONNRESET), which was mapped to
// ZN_ERR_INTERNAL ("a bug in the node") and logged at error level, with a "request finished" line
// saying 200. Now nothing is answered, the line says the caller left (499, as the pipeline records
// a caller that leaves) and the heartbeat's window counts no server-side failure.
import t from 'tap';
import { rawSocket } from '../fixtures/raw-socket.js';
import { buildApp } from '../../edge-node/src/app.js';
import { ConfigHolder } from '../../edge-node/src/config/config-holder.js';
import { fromLocalConfig } from '../../edge-node/src/config/runtime-config.js';
import { createLogger } from '../../edge-node/src/logger.js';
import { RequestWindow } from '../../edge-node/src/metrics/request-window.js';
import { CALLER_GONE_STATUS } from '../../edge-node/src/pipeline/run-pipeline.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { waitFor } from '../fixtures/wait-for.js';
import { listenOnLoopback, testConfig } from './node-harness.js';

for (const how of ['ends its side of the connection', 'resets the connection'] as const) {
  t.test(`a caller that ${how} mid-upload is logged as having left, not as a node failure`, async (t) => {
    const upstream = await startFakeUpstream(t);
    const logLines: string[] = [];
    const logger = createLogger({ level: 'debug', destination: { write: (line: string) => void logLines.push(line) } });
    const logs = () => logLines.map((line) => JSON.parse(line) as Record<string, unknown>);
    const requestWindow = new RequestWindow();
    const app = await buildApp({ holder: ConfigHolder.ready(fromLocalConfig(testConfig(upstream.url))), logger, requestWindow });
    const { origin } = await listenOnLoopback(t, app);
    let arrived = false;
    // Listeners run in order: fastify's handler, which starts reading the body, has run by then.
    app.server.on('request', () => (arrived = true));

    const { socket, answer, closed } = rawSocket(t, origin);
    socket.write('POST /v1/chat/completions HTTP/1.1\r\nHost: node\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"model":"echo"');
    await waitFor(() => arrived, { what: 'the node to start reading the body' });
    // Ending only its side, the caller could still read an answer: none must come.
    if (how === 'ends its side of the connection') socket.end();
    else socket.resetAndDestroy();
    await waitFor(() => closed(), { what: 'the connection to close' });

    // The error handler runs after the "request finished" line; wait for its own line either way.
    await waitFor(() => logs().some((l) => l.msg === 'request body never arrived' || l.msg === 'request failed'), { what: "the error handler's line" });
    const finished = logs().find((l) => l.msg === 'request finished');
    t.match(finished, { status: CALLER_GONE_STATUS, outcome: 'aborted', callerAborted: true }, 'the caller left');
    t.notOk(finished?.errorCode, 'with no error code');
    t.same(logs().filter((l) => (l.level as number) >= 40).map((l) => l.msg), [], 'no warning or error line');
    t.same(requestWindow.figures(), { requests: 1, errors: 0 }, 'counted, not as a server-side failure');
    t.equal(answer(), '', 'nothing was answered');
    t.equal(upstream.requests.length, 0, 'nothing was forwarded');
  });
}
