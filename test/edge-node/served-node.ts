// A real `zenova-node serve --state-dir <dir>` child process listening on 127.0.0.1:0, reconnecting
// to its control plane quickly (50–300 ms backoff), for the tests that drive the node's own process;
// and a chat request that reports only the status and error code.
import type { Test } from 'tap';
import { startProcess, tsEntry } from '../fixtures/processes.js';
import type { StartedProcess } from '../fixtures/processes.js';

export const LISTENING = /"msg":"node-edge listening"/;

export interface ServedNode {
  proc: StartedProcess;
  /** The caller-facing base, `http://127.0.0.1:<port>` (no /v1). */
  url: string;
  /** The node's "listening" log line. */
  listening: Record<string, unknown>;
}

export async function serveNode(t: Test, stateDir: string): Promise<ServedNode> {
  const entry = tsEntry('edge-node/src/main.ts');
  const proc = await startProcess({
    name: 'zenova-node',
    command: entry.command,
    args: [...entry.args, 'serve', '--state-dir', stateDir, '--listen', '127.0.0.1:0'],
    env: { ZENOVA_NODE_RECONNECT_BASE_MS: '50', ZENOVA_NODE_RECONNECT_MAX_MS: '300' },
    readyLine: LISTENING,
    t,
  });
  const listening = JSON.parse(await proc.waitForLine(LISTENING)) as Record<string, unknown>;
  return { proc, url: String(listening.url), listening };
}

/** A one-message chat request with key `key`: its status and, for a refusal, its code. */
export async function chatStatus(url: string, key: string, model = 'echo'): Promise<{ status: number; code: string | undefined }> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'ping' }] }),
  });
  const body = (await res.json()) as { error?: { code?: string } };
  return { status: res.status, code: body.error?.code };
}
