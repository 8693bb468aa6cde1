/**
 * End-to-end building blocks: a real control-plane process over HTTPS (its own test CA), real
 * `zenova-node enroll` / `serve` processes, and admin API calls that verify TLS.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, fetch } from 'undici';
import { startProcess, tsEntry, type StartedProcess } from '../fixtures/processes.js';
import { createTestCa, issueServerCert } from '../fixtures/tls.js';
import type { TestDatabase } from '../fixtures/postgres.js';

type Teardown = { teardown(fn: () => unknown): void };

export function tempDir(t: Teardown, prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

export interface HttpsMaterial {
  caPem: string;
  caFile: string;
  certFile: string;
  keyFile: string;
}

/** A CA and a console/API certificate for 127.0.0.1 (and, unless told otherwise, localhost). */
export async function httpsMaterial(dir: string, names: { dnsNames?: string[]; ipAddresses?: string[] } = { dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'] }): Promise<HttpsMaterial> {
  const ca = await createTestCa();
  const cert = await issueServerCert(ca, names);
  mkdirSync(dir, { recursive: true });
  const m = { caPem: ca.certPem, caFile: join(dir, 'ca.pem'), certFile: join(dir, 'tls.crt'), keyFile: join(dir, 'tls.key') };
  writeFileSync(m.caFile, ca.certPem);
  writeFileSync(m.certFile, cert.certPem);
  writeFileSync(m.keyFile, cert.keyPem, { mode: 0o600 });
  return m;
}

export interface ControlPlane {
  url: string;
  gatewayPort: number;
  proc: StartedProcess;
  adminToken: string;
  https: HttpsMaterial;
  api<T = unknown>(method: string, path: string, body?: unknown): Promise<{ status: number; body: T }>;
}

export const ADMIN_TOKEN = `zn_admin_test_${'x'.repeat(40)}`;
export const SECRET_ENC_KEY = randomBytes(32).toString('base64');

export async function startControlPlane(
  t: Teardown,
  opts: { db: TestDatabase; https: HttpsMaterial; gatewayTlsDir: string; gatewayPort?: number; listenPort?: number; secretEncKey?: string; env?: Record<string, string>; nodeArgs?: string[] },
): Promise<ControlPlane> {
  const { command, args } = tsEntry('control-plane/src/main.ts');
  const proc = await startProcess({
    name: 'control-plane',
    command,
    // Node's own options (e.g. `--cpu-prof`) before the loader and the entry.
    args: [...(opts.nodeArgs ?? []), ...args],
    env: {
      ZENOVA_DATABASE_URL: opts.db.url,
      ZENOVA_LISTEN: `127.0.0.1:${opts.listenPort ?? 0}`,
      ZENOVA_ADMIN_TOKEN: ADMIN_TOKEN,
      ZENOVA_SECRET_ENC_KEY: opts.secretEncKey ?? SECRET_ENC_KEY,
      ZENOVA_TLS_CERT_FILE: opts.https.certFile,
      ZENOVA_TLS_KEY_FILE: opts.https.keyFile,
      ZENOVA_GATEWAY_LISTEN: `127.0.0.1:${opts.gatewayPort ?? 0}`,
      ZENOVA_GATEWAY_HOSTS: 'localhost,127.0.0.1',
      ZENOVA_GATEWAY_TLS_DIR: opts.gatewayTlsDir,
      ZENOVA_HEARTBEAT_INTERVAL_MS: '200',
      ZENOVA_NODE_OFFLINE_AFTER_SECONDS: '3',
      ...opts.env,
    },
    readyLine: /"msg":"control plane listening"/,
    timeoutMs: 60_000,
    t,
  });
  const ready = JSON.parse(await proc.waitForLine(/"msg":"control plane listening"/)) as { url: string };
  const gw = JSON.parse(await proc.waitForLine(/"msg":"node gateway listening"/)) as { port: number };
  const agent = new Agent({ connect: { ca: opts.https.caPem } });
  t.teardown(() => agent.close());
  return {
    url: ready.url,
    gatewayPort: gw.port,
    proc,
    adminToken: ADMIN_TOKEN,
    https: opts.https,
    async api<T>(method: string, path: string, body?: unknown) {
      const res = await fetch(`${ready.url}${path}`, {
        method,
        dispatcher: agent,
        headers: { authorization: `Bearer ${ADMIN_TOKEN}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const text = await res.text();
      return { status: res.status, body: (text ? JSON.parse(text) : undefined) as T };
    },
  };
}

export interface CreatedNode {
  node: { id: string; name: string; status: string; onboardingStage: string | null };
  install: { command: string; token: string; expiresAt: string };
}

export async function createNode(cp: ControlPlane, name: string, extra: Record<string, unknown> = {}): Promise<CreatedNode> {
  const res = await cp.api<CreatedNode>('POST', '/api/v1/nodes', {
    name,
    address: `${name}.nodes.test`,
    controlPlaneUrl: cp.url,
    surfaces: ['model'],
    caPem: cp.https.caPem,
    ...extra,
  });
  if (res.status !== 201) throw new Error(`create node ${name}: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body;
}

export interface NodeView {
  name: string;
  status: string;
  onboardingStage: string | null;
  version: string | null;
  lastHeartbeatAt: string | null;
  appliedConfigVersion: number | null;
  configVersionsBehind: number | null;
  configError: { version: number; code: string; message: string } | null;
}

export async function nodeView(cp: ControlPlane, name: string): Promise<NodeView> {
  const res = await cp.api<NodeView>('GET', `/api/v1/nodes/${name}`);
  if (res.status !== 200) throw new Error(`GET node ${name}: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body;
}

/** Runs `zenova-node enroll` to the end. */
export async function runEnroll(t: Teardown, opts: { url: string; token: string; stateDir: string; caFile?: string; extra?: string[] }): Promise<{ code: number | null; output: string }> {
  const { command, args } = tsEntry('edge-node/src/main.ts');
  const proc = await startProcess({
    name: 'zenova-node enroll',
    command,
    args: [...args, 'enroll', '--control-plane', opts.url, '--token', opts.token, '--state-dir', opts.stateDir, ...(opts.caFile ? ['--ca-file', opts.caFile] : []), ...(opts.extra ?? [])],
    t,
  });
  const exit = await proc.exited;
  return { code: exit.code, output: proc.output() };
}

/** `zenova-node serve --state-dir D --listen 127.0.0.1:0`, ready when it listens. */
export async function startNodeServe(t: Teardown, opts: { stateDir: string; env?: Record<string, string> }): Promise<{ proc: StartedProcess; url: string }> {
  const { command, args } = tsEntry('edge-node/src/main.ts');
  const proc = await startProcess({
    name: 'zenova-node serve',
    command,
    args: [...args, 'serve', '--state-dir', opts.stateDir, '--listen', '127.0.0.1:0'],
    env: { ZENOVA_NODE_RECONNECT_BASE_MS: '100', ZENOVA_NODE_RECONNECT_MAX_MS: '500', ...opts.env },
    readyLine: /"msg":"node-edge listening"/,
    timeoutMs: 60_000,
    t,
  });
  const ready = JSON.parse(await proc.waitForLine(/"msg":"node-edge listening"/)) as { url: string };
  return { proc, url: ready.url };
}

export const UPSTREAM_SECRET = 'sk-e2e-upstream-secret-never-logged-7f3a9c';

/**
 * Configures the control plane through its admin API as an operator would: an account, the fake
 * upstream (with a provider secret), the route alias `echo`, and one API key. Returns the key.
 */
export async function configureDemo(cp: ControlPlane, upstreamUrl: string, account = 'e2e'): Promise<{ apiKey: string; apiKeyId: string }> {
  const must = async (method: string, path: string, body: unknown, want = 201): Promise<Record<string, unknown>> => {
    const res = await cp.api<Record<string, unknown>>(method, path, body);
    if (res.status !== want) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(res.body)}`);
    return res.body;
  };
  await must('POST', '/api/v1/accounts', { name: account });
  const upstreams = await cp.api<{ upstreams: Array<{ name: string }> }>('GET', '/api/v1/upstreams');
  if (!upstreams.body.upstreams.some((u) => u.name === 'fake')) {
    await must('POST', '/api/v1/upstreams', { name: 'fake', kind: 'openai-compatible', baseUrl: upstreamUrl, apiKey: UPSTREAM_SECRET });
    await must('POST', '/api/v1/routes', { alias: 'echo', targets: [{ upstream: 'fake', model: 'demo-echo' }] });
  }
  const key = (await must('POST', '/api/v1/api-keys', { account, name: `${account}-key` })) as { secret: string; apiKey: { id: string } };
  return { apiKey: key.secret, apiKeyId: key.apiKey.id };
}

/** One chat completion through a node's Base URL; the HTTP status (and the error code, if any). */
export async function callNode(nodeUrl: string, apiKey: string, text = 'ping'): Promise<number> {
  return (await callNodeDetailed(nodeUrl, apiKey, text)).status;
}

export async function callNodeDetailed(nodeUrl: string, apiKey: string, text = 'ping'): Promise<{ status: number; code?: string }> {
  const res = await fetch(`${nodeUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: text }] }),
  });
  const body = (await res.json().catch(() => ({}))) as { error?: { code?: string } };
  return { status: res.status, code: body.error?.code };
}

/** The token an issued command pipes to the installer (`printf '%s\\n' TOKEN | sudo ./zenova install node … --token-file -`). */
export const tokenOf = (command: string): string => {
  const m = /^printf '%s\\n' (\S+) \| sudo /.exec(command);
  if (!m) throw new Error(`no piped token in ${command}`);
  return m[1]!;
};

/** Counts log lines of a process that match. */
export function countLines(proc: StartedProcess, re: RegExp): number {
  return proc.output().split('\n').filter((l) => re.test(l)).length;
}

/**
 * One raw attempt to open the control stream as a node would (hello included), returning the first
 * answer: accepted, or the refusal code. For checking credentials from outside the node process.
 */
export async function tryControlStream(opts: { target: string; serverName: string; caPem: string; nodeId: string; credential: string; protocolVersion?: number }): Promise<{ accepted: boolean; code?: string }> {
  const grpc = await import('@grpc/grpc-js');
  const proto = await import('../../proto/src/index.js');
  const client = new proto.NodeControlClient(opts.target, grpc.credentials.createSsl(Buffer.from(opts.caPem)), { 'grpc.ssl_target_name_override': opts.serverName });
  const md = new grpc.Metadata();
  md.set(proto.NODE_ID_METADATA_KEY, opts.nodeId);
  md.set(proto.NODE_CREDENTIAL_METADATA_KEY, opts.credential);
  const stream = client.connect(md);
  try {
    return await new Promise((resolve) => {
      stream.on('data', (m: { helloAck?: { accepted: boolean }; refusal?: { error?: { code: string } } }) => {
        if (m.helloAck) resolve({ accepted: m.helloAck.accepted });
        else if (m.refusal) resolve({ accepted: false, code: m.refusal.error?.code });
      });
      stream.on('error', (err: Error & { details?: string }) => resolve({ accepted: false, code: /^([A-Z_]+)/.exec(err.details ?? '')?.[1] ?? err.message }));
      stream.write({ hello: { nodeId: opts.nodeId, nodeName: 'probe', version: '0.0.0', protocolVersion: opts.protocolVersion ?? proto.PROTOCOL_VERSION, hostname: 'probe', arch: 'x64', appliedConfigVersion: 0n } });
    });
  } finally {
    stream.cancel();
    client.close();
  }
}

/** Creates `name` on the control plane and enrolls it into `stateDir` with its install command. */
export async function enrollNewNode(t: Teardown, cp: ControlPlane, name: string, stateDir: string): Promise<CreatedNode> {
  const created = await createNode(cp, name);
  const r = await runEnroll(t, { url: cp.url, token: tokenOf(created.install.command), stateDir, caFile: cp.https.caFile });
  if (r.code !== 0) throw new Error(`enroll ${name} failed (exit ${r.code}): ${r.output}`);
  return created;
}

/** A port free on 127.0.0.1 right now (for a process that must come back on the same port). */
export { freePort } from '../fixtures/free-port.js';
