// A listening node whose only tool server ("tools") is guarded by output rules the test gives
// (policy "p" on the caller's key), with a spool that keeps every record, and a tool server that
// answers every POST with one body: for tests of how the node reads tool answers it cannot parse.
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Test } from 'tap';
import type { GuardrailPolicy, RequestRecord } from '../../../proto/src/index.js';
import { buildApp } from '../../../edge-node/src/app.js';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { fromBundle } from '../../../edge-node/src/config/runtime-config.js';
import { createLogger } from '../../../edge-node/src/logger.js';
import type { RequestSpool } from '../../../edge-node/src/spool/request-spool.js';
import { bundleKey, testBundle } from '../config-fixtures.js';
import { policy } from '../guardrails/guardrail-fixtures.js';
import { rawToolServer } from './priced-tool-node.js';

/** A tools/call of the tool `report`, as a caller without the SDK sends it. */
export const REPORT_CALL = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"report","arguments":{}}}';

/** The node's /mcp/tools URL for `caller`'s key, under output `rules`, and the records it wrote. */
export async function startGuardedToolNode(t: Test, caller: { sha256: string }, toolServerUrl: string, rules: GuardrailPolicy['rules']): Promise<{ url: string; records: RequestRecord[] }> {
  const records: RequestRecord[] = [];
  const spool: RequestSpool = { open: () => undefined, finalise: async (record) => void records.push(record), keepsBodies: () => true, fullness: () => 0 };
  const bundle = testBundle({
    nodeId: 'node-mcp', version: 5, upstreamUrl: 'http://127.0.0.1:9/v1',
    keys: [bundleKey('key-mcp', caller.sha256, { guardrailPolicyId: 'p' })],
    node: { surfaces: ['model', 'tools'], spool: { quotaBytes: 1 << 20, fullPolicy: 'reject' } },
    toolServers: [{ name: 'tools', url: toolServerUrl, apiKey: null, timeoutMs: 10_000, callMicros: 0 }],
    guardrailPolicies: [policy('p', rules)],
  });
  const app = await buildApp({ holder: ConfigHolder.ready(fromBundle(bundle)), logger: createLogger({ level: 'silent' }), services: { nodeId: bundle.nodeId, spool } });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  return { url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/mcp/tools`, records };
}

/** A tool server answering every POST with `body` under `contentType`. */
export function toolServerAnswering(t: Test, contentType: string, body: string): Promise<{ url: string; bodies: string[] }> {
  return rawToolServer(t, (_req: http.IncomingMessage, res: http.ServerResponse) => {
    res.writeHead(200, { 'content-type': contentType });
    res.end(body);
  });
}
