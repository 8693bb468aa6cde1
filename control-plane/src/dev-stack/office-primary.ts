/**
 * office-primary, the central node, enrolled through the control plane like any other node: create
 * it over the admin API the first time, redeem an install (or, if its local state was lost, a
 * reenroll) token with `zenova-node enroll`, and from then on reuse the state dir.
 */
import { spawn } from 'node:child_process';
import { existsSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { Agent, fetch } from 'undici';
import { writeFileAtomic } from '../fs/atomic-write.js';
import { nodeChildEnv } from './node-child-env.js';

export interface AdminClient {
  call<T>(method: string, path: string, body?: unknown): Promise<{ status: number; body: T }>;
  close(): Promise<void>;
}

export function adminClient(baseUrl: string, adminToken: string, caPem: string): AdminClient {
  const agent = new Agent({ connect: { ca: caPem } });
  return {
    async call<T>(method: string, path: string, body?: unknown) {
      const res = await fetch(`${baseUrl}${path}`, {
        method,
        dispatcher: agent,
        headers: { authorization: `Bearer ${adminToken}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const text = await res.text();
      return { status: res.status, body: (text ? JSON.parse(text) : undefined) as T };
    },
    close: () => agent.close(),
  };
}

interface ApiError { error?: { code?: string; message?: string } }
interface NodeView { name: string; enrolledAt: string | null }
interface IssuedCommand { token: string }

function describe(status: number, body: unknown): string {
  const e = (body as ApiError | undefined)?.error;
  return e ? `${e.code ?? status}: ${e.message ?? ''}` : `HTTP ${status}`;
}

/** Makes sure `stateDir` holds an enrolled identity for `name`; returns what it did. */
export async function ensureNodeEnrolled(opts: {
  api: AdminClient;
  name: string;
  address: string;
  controlPlaneUrl: string;
  caPem: string;
  caFile: string;
  stateDir: string;
  repoRoot: string;
  log: (line: string) => void;
}): Promise<'reused' | 'enrolled' | 're-enrolled'> {
  if (existsSync(join(opts.stateDir, 'identity.json'))) return 'reused';
  const existing = await opts.api.call<NodeView & ApiError>('GET', `/api/v1/nodes/${opts.name}`);
  let token: string;
  let reenroll = false;
  if (existing.status === 404) {
    const created = await opts.api.call<{ install: IssuedCommand } & ApiError>('POST', '/api/v1/nodes', {
      name: opts.name,
      region: 'central',
      surfaces: ['model', 'tools'],
      address: opts.address,
      controlPlaneUrl: opts.controlPlaneUrl,
      caPem: opts.caPem,
    });
    if (created.status !== 201) throw new Error(`cannot create node ${opts.name}: ${describe(created.status, created.body)}`);
    token = created.body.install.token;
  } else if (existing.status === 200) {
    // Known to the control plane but its local identity is gone (or it never enrolled).
    reenroll = existing.body.enrolledAt !== null;
    const kind = reenroll ? 'reenroll-command' : 'install-command';
    const issued = await opts.api.call<IssuedCommand & ApiError>('POST', `/api/v1/nodes/${opts.name}/${kind}`);
    if (issued.status !== 200 && issued.status !== 201) throw new Error(`cannot issue a token for ${opts.name}: ${describe(issued.status, issued.body)}`);
    token = issued.body.token;
  } else {
    throw new Error(`cannot look up node ${opts.name}: ${describe(existing.status, existing.body)}`);
  }
  // Through a 0600 token file, never argv: the process list is readable by every local user.
  const tokenFile = join(dirname(opts.stateDir), `.enroll-token-${process.pid}`);
  writeFileAtomic(tokenFile, token, 0o600);
  const args = ['--import', 'tsx', join(opts.repoRoot, 'edge-node/src/main.ts'), 'enroll', '--control-plane', opts.controlPlaneUrl, '--token-file', tokenFile, '--state-dir', opts.stateDir, '--ca-file', opts.caFile, ...(reenroll ? ['--reenroll'] : [])];
  await new Promise<void>((resolve, reject) => {
    let out = '';
    const child = spawn(process.execPath, args, { cwd: opts.repoRoot, env: nodeChildEnv(process.env), stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`zenova-node enroll failed (exit ${code}): ${out.trim()}`))));
  }).finally(() => rmSync(tokenFile, { force: true }));
  opts.log(`  ${opts.name} ${reenroll ? 're-enrolled' : 'enrolled'} (state: ${opts.stateDir})`);
  return reenroll ? 're-enrolled' : 'enrolled';
}
