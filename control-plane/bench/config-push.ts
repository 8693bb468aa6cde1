/**
 * `npm run bench:config` — config push at fleet scale (DESIGN §11, not a test). One real
 * zenova-control child process on a throwaway PostgreSQL; N simulated nodes (raw grpc-js clients,
 * each its own TLS connection on loopback, enrolled through the nodes module) that check every
 * pushed bundle's Ed25519 signature and ack it (the full schema check a real node also runs is left
 * out: here all nodes share one process, and their parsing would be measured instead of the push); M config changes committed one after another (or in one
 * burst). Prints p50/p99 time from commit to each node's ack of that version or a newer one, and
 * the control plane's CPU and memory, read from /proc for the child process.
 *
 *   npm run bench:config -- [--nodes 200] [--changes 20] [--keys 1000] [--burst]
 *                           [--database-url postgres://…]   (default: a throwaway local cluster)
 *                           [--cpu-prof DIR]   (a V8 CPU profile of the control plane, written at its exit)
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createPublicKey, randomBytes, verify, type KeyObject } from 'node:crypto';
import { chmodSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import * as grpc from '@grpc/grpc-js';
import pg from 'pg';
import {
  NODE_CREDENTIAL_METADATA_KEY,
  NODE_ID_METADATA_KEY,
  NodeControlClient,
  PROTOCOL_VERSION,
  type ControlMessage,
  type NodeMessage,
} from '../../proto/src/index.js';
import { recordConfigChange } from '../src/config/config-changes.js';
import { createSecretBox } from '../src/crypto/secret-box.js';
import { startLocalPostgres, type LocalPostgres } from '../src/dev-stack/local-postgres.js';
import { issueCredential } from '../src/nodes/credentials.js';
import { createNode } from '../src/nodes/node-admin.js';
import { recordEnrollment } from '../src/nodes/node-repository.js';
import { nodeCreateSchema } from '../src/nodes/node-validation.js';
import { withTransaction } from '../src/nodes/with-transaction.js';
import { loadSettings } from '../src/settings.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const START_DEADLINE_MS = 60_000;
const SYNC_DEADLINE_MS = 120_000;
const CONNECT_BATCH = 25;
const RSS_SAMPLE_MS = 100;

// ---- arguments ----

function positiveInt(value: string | undefined, fallback: number, name: string, max: number): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > max) throw new Error(`--${name} must be an integer from 1 to ${max}, got '${value}'`);
  return n;
}

const { values: args } = parseArgs({
  options: {
    nodes: { type: 'string' },
    changes: { type: 'string' },
    keys: { type: 'string' },
    burst: { type: 'boolean', default: false },
    'database-url': { type: 'string' },
    'cpu-prof': { type: 'string' },
    help: { type: 'boolean', short: 'h', default: false },
  },
});
if (args.help) {
  process.stdout.write('Usage: npm run bench:config -- [--nodes 200] [--changes 20] [--keys 1000] [--burst] [--database-url URL] [--cpu-prof DIR]\n');
  process.exit(0);
}
const NODES = positiveInt(args.nodes, 200, 'nodes', 2000);
const CHANGES = positiveInt(args.changes, 20, 'changes', 1000);
const KEYS = positiveInt(args.keys, 1000, 'keys', 200_000);

// ---- small helpers ----

const log = (line: string): void => { process.stderr.write(`[bench] ${line}\n`); };

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => resolve(typeof address === 'object' && address ? address.port : 0));
    });
  });
}

async function until<T>(what: string, deadlineMs: number, probe: () => T | undefined | Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${deadlineMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

/** CPU seconds (user+system) and RSS of a process, from /proc (Linux). */
function procStats(pid: number): { cpuSeconds: number; rssBytes: number; peakRssBytes: number } {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // Fields after the ")" that ends the command name: utime and stime are the 12th and 13th there.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(fields[11]) + Number(fields[12]);
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kib = (key: string): number => Number(new RegExp(`^${key}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? 0) * 1024;
  return { cpuSeconds: ticks / CLOCK_TICKS, rssBytes: kib('VmRSS'), peakRssBytes: kib('VmHWM') };
}
// USER_HZ is 100 on every Linux this runs on (it is fixed in the kernel ABI for /proc).
const CLOCK_TICKS = 100;

// ---- the pieces ----

interface Cleanup { (): Promise<void> | void }
const cleanups: Cleanup[] = [];

async function database(): Promise<string> {
  const given = args['database-url'] ?? process.env.ZENOVA_BENCH_DATABASE_URL;
  const adminUrl = given ?? await (async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'zenova-bench-pg-'));
    // As root, PostgreSQL runs as the postgres user, who must traverse this dir (the cluster inside stays 0700).
    chmodSync(dir, 0o755);
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const password = randomBytes(12).toString('hex');
    const port = await freePort();
    const server: LocalPostgres = await startLocalPostgres({ dataDir: path.join(dir, 'data'), port, superuser: 'postgres', password, log: () => undefined });
    cleanups.push(() => server.stop());
    return `postgres://postgres:${password}@127.0.0.1:${port}/postgres`;
  })();
  const name = `zenova_bench_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`create database ${name}`);
  await admin.end();
  cleanups.push(async () => {
    const c = new pg.Client({ connectionString: adminUrl });
    await c.connect();
    await c.query(`drop database if exists ${name} with (force)`);
    await c.end();
  });
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

interface ControlPlane { child: ChildProcess; pid: number; gatewayPort: number }

/** The control plane's warnings and errors (shown when the bench fails). */
const problems: string[] = [];

async function startControlPlane(databaseUrl: string, secretKey: Buffer): Promise<ControlPlane> {
  const tlsDir = mkdtempSync(path.join(os.tmpdir(), 'zenova-bench-tls-'));
  cleanups.push(() => rmSync(tlsDir, { recursive: true, force: true }));
  const profile = args['cpu-prof'] === undefined ? [] : ['--cpu-prof', '--cpu-prof-dir', path.resolve(args['cpu-prof'])];
  const child = spawn(process.execPath, [...profile, '--import', 'tsx', path.join(ROOT, 'control-plane/src/main.ts')], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: {
      ...process.env,
      ZENOVA_DATABASE_URL: databaseUrl,
      ZENOVA_SECRET_ENC_KEY: secretKey.toString('base64'),
      ZENOVA_ADMIN_TOKEN: randomBytes(24).toString('hex'),
      ZENOVA_LISTEN: '127.0.0.1:0',
      ZENOVA_GATEWAY_LISTEN: '127.0.0.1:0',
      ZENOVA_GATEWAY_TLS_DIR: tlsDir,
      ZENOVA_LOG_LEVEL: 'info',
    },
  });
  cleanups.push(async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
    await exited;
    clearTimeout(timer);
  });
  let gatewayPort: number | undefined;
  let ready = false;
  let tail = '';
  let buffered = '';
  // Drained all along: a full pipe would stall the control plane's logging.
  child.stdout.on('data', (chunk: Buffer) => {
    buffered += chunk.toString('utf8');
    let nl: number;
    while ((nl = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, nl);
      buffered = buffered.slice(nl + 1);
      try {
        const entry = JSON.parse(line) as { msg?: string; port?: number; level?: number };
        if ((entry.level ?? 0) >= 40) problems.push(line.slice(0, 600));
        if (ready) continue;
        tail = (tail + line + '\n').slice(-4000);
        if (entry.msg === 'node gateway listening' && typeof entry.port === 'number') gatewayPort = entry.port;
        if (entry.msg === 'control plane listening') ready = true;
      } catch {
        // not a log line
      }
    }
  });
  child.stderr.on('data', (chunk: Buffer) => { tail = (tail + chunk.toString('utf8')).slice(-4000); });
  await until('the control plane to start', START_DEADLINE_MS, () => {
    if (child.exitCode !== null) throw new Error(`zenova-control exited (${child.exitCode}):\n${tail}`);
    return ready && gatewayPort !== undefined ? true : undefined;
  });
  return { child, pid: child.pid!, gatewayPort: gatewayPort! };
}

/** A config worth shipping: an account, KEYS keys, an upstream with a secret, a route, a price. */
async function seed(pool: pg.Pool, secretKey: Buffer): Promise<void> {
  const box = createSecretBox(secretKey);
  await withTransaction(pool, async (c) => {
    const account = (await c.query<{ id: string }>("insert into accounts (name) values ('bench') returning id")).rows[0]!.id;
    await c.query(
      `insert into api_keys (account_id, name, key_hash, key_prefix)
       select $1, 'key-' || i, sha256(convert_to('bench-key-' || i, 'UTF8')), 'zn_sk_bench_' from generate_series(1, $2::int) as i`,
      [account, KEYS],
    );
    const upstream = (await c.query<{ id: string }>("insert into upstreams (name, kind, base_url) values ('bench-upstream', 'openai-compatible', 'http://127.0.0.1:9/v1') returning id")).rows[0]!.id;
    await c.query('update upstreams set secret_encrypted = $2 where id = $1', [upstream, box.seal(`sk-bench-${randomBytes(16).toString('hex')}`, `upstream-secret:${upstream}`)]);
    await c.query(`insert into routes (alias, targets) values ('bench-model', '[{"upstream":"bench-upstream","model":"m","weight":1}]')`);
    await c.query("insert into prices (model, input_micros_per_token, output_micros_per_token) values ('bench-model', 1, 2)");
    await recordConfigChange(c, { entity: 'account', entityId: account, action: 'create' });
  });
}

async function publish(pool: pg.Pool): Promise<{ version: number; committedAt: number }> {
  const version = await withTransaction(pool, async (c) => {
    await c.query("update prices set input_micros_per_token = input_micros_per_token + 1, updated_at = now() where model = 'bench-model'");
    return recordConfigChange(c, { entity: 'price', entityId: 'bench-model', action: 'update' });
  });
  return { version, committedAt: performance.now() };
}

/** One simulated node: verifies each push and acks it; remembers when it acked which version. */
class SimNode {
  readonly acks: Array<{ version: number; at: number }> = [];
  pushes = 0;
  bundleBytes = 0;
  failure: string | undefined;
  private readonly client: NodeControlClient;
  private readonly stream: grpc.ClientDuplexStream<NodeMessage, ControlMessage>;
  readonly helloAt = performance.now();

  constructor(port: number, caPem: string, private readonly publicKey: KeyObject, readonly node: { id: string; name: string; credential: string }) {
    this.client = new NodeControlClient(`127.0.0.1:${port}`, grpc.credentials.createSsl(Buffer.from(caPem)), {
      'grpc.ssl_target_name_override': 'localhost',
      // Its own connection, as separate nodes have: grpc-js would otherwise share one.
      'grpc.use_local_subchannel_pool': 1,
    });
    const md = new grpc.Metadata();
    md.set(NODE_ID_METADATA_KEY, node.id);
    md.set(NODE_CREDENTIAL_METADATA_KEY, node.credential);
    this.stream = this.client.connect(md);
    this.stream.on('data', (m: ControlMessage) => this.onMessage(m));
    this.stream.on('error', (err: Error) => { this.failure ??= err.message; });
    this.stream.write({
      hello: { nodeId: node.id, nodeName: node.name, version: '0.0.0-bench', protocolVersion: PROTOCOL_VERSION, hostname: 'bench', arch: os.arch(), appliedConfigVersion: 0n },
    });
  }

  get appliedVersion(): number {
    return this.acks.at(-1)?.version ?? 0;
  }

  /** When this node first acked `version` or a newer one. */
  appliedAt(version: number): number | undefined {
    return this.acks.find((a) => a.version >= version)?.at;
  }

  private onMessage(message: ControlMessage): void {
    if (message.refusal) this.failure ??= `${message.refusal.error?.code}: ${message.refusal.error?.message}`;
    const push = message.configPush;
    if (push === undefined) return;
    this.pushes += 1;
    this.bundleBytes = push.bundle.byteLength;
    const version = Number(push.version);
    if (!verify(null, push.bundle, this.publicKey, push.signature)) {
      this.failure ??= `push ${version} refused: CONFIG_BAD_SIGNATURE`;
      this.stream.write({ configAck: { version: push.version, ok: false, error: { code: 'CONFIG_BAD_SIGNATURE', message: 'bad signature', retryable: false } } });
      return;
    }
    this.acks.push({ version, at: performance.now() });
    this.stream.write({ configAck: { version: push.version, ok: true, error: undefined } });
  }

  close(): void {
    this.stream.cancel();
    this.client.close();
  }
}

function row(cells: Array<string | number>): string {
  return cells.map((c, i) => String(c).padStart(i === 0 ? 28 : 12)).join(' ');
}

const ms = (n: number): string => (Number.isFinite(n) ? n.toFixed(1) : '-');
const mib = (n: number): string => (n / 2 ** 20).toFixed(1);

async function main(): Promise<void> {
  const secretKey = randomBytes(32);
  log('starting PostgreSQL and zenova-control');
  const databaseUrl = await database();
  const cp = await startControlPlane(databaseUrl, secretKey);
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 8 });
  cleanups.push(() => pool.end());
  await seed(pool, secretKey);
  const caPem = (await pool.query<{ ca_cert_pem: string }>('select ca_cert_pem from gateway_tls_identity')).rows[0]!.ca_cert_pem;
  const publicKey = createPublicKey((await pool.query<{ public_key_pem: string }>("select public_key_pem from signing_keys where kind = 'config' and retired_at is null")).rows[0]!.public_key_pem);

  log(`enrolling ${NODES} nodes`);
  const defaults = loadSettings({ ZENOVA_DATABASE_URL: databaseUrl, ZENOVA_ADMIN_TOKEN: 'x'.repeat(32) });
  const timings = { validityMs: defaults.nodes.credentialValidityMs, rotateAfterMs: defaults.nodes.credentialRotateAfterMs, handoverMs: defaults.nodes.credentialHandoverMs };
  const enrolled: Array<{ id: string; name: string; credential: string }> = [];
  for (let i = 0; i < NODES; i += 1) {
    const input = nodeCreateSchema.parse({ name: `bench-${i}`, surfaces: ['model'], address: '127.0.0.1:1', controlPlaneUrl: 'https://127.0.0.1' });
    const { node } = await createNode(pool, input, defaults.nodes.installTokenTtlMs);
    await recordEnrollment(pool, node.id, { hostname: 'bench', arch: os.arch(), version: '0.0.0-bench', protocolVersion: PROTOCOL_VERSION });
    const issued = await issueCredential(pool, node.id, timings);
    enrolled.push({ id: node.id, name: node.name, credential: issued.credential });
  }

  log(`connecting ${NODES} nodes over TLS`);
  const before = procStats(cp.pid);
  const connectStart = performance.now();
  const nodes: SimNode[] = [];
  cleanups.push(() => { for (const n of nodes) n.close(); });
  const startVersion = Number((await pool.query<{ v: string }>('select max(version)::text as v from config_changes')).rows[0]!.v);
  for (let i = 0; i < enrolled.length; i += CONNECT_BATCH) {
    const batch = enrolled.slice(i, i + CONNECT_BATCH).map((n) => new SimNode(cp.gatewayPort, caPem, publicKey, n));
    nodes.push(...batch);
    await until('a batch of nodes to sync', SYNC_DEADLINE_MS, () => {
      const failed = batch.find((n) => n.failure !== undefined);
      if (failed) throw new Error(`node ${failed.node.name}: ${failed.failure}`);
      return batch.every((n) => n.appliedVersion >= startVersion) ? true : undefined;
    });
  }
  const connectMs = performance.now() - connectStart;
  const initial = nodes.map((n) => n.appliedAt(startVersion)! - n.helloAt).sort((a, b) => a - b);
  const afterConnect = procStats(cp.pid);

  log(`publishing ${CHANGES} changes${args.burst ? ' in one burst' : ', one at a time'}`);
  let peakRss = afterConnect.rssBytes;
  const sampler = setInterval(() => { peakRss = Math.max(peakRss, procStats(cp.pid).rssBytes); }, RSS_SAMPLE_MS);
  cleanups.push(() => clearInterval(sampler));
  const pushesBefore = nodes.reduce((sum, n) => sum + n.pushes, 0);
  const published: Array<{ version: number; committedAt: number }> = [];
  const publishStart = performance.now();
  const allAt = (version: number): Promise<true> => until(`every node to apply version ${version}`, SYNC_DEADLINE_MS, () => {
    const failed = nodes.find((n) => n.failure !== undefined);
    if (failed) throw new Error(`node ${failed.node.name}: ${failed.failure}`);
    return nodes.every((n) => n.appliedVersion >= version) ? true : undefined;
  });
  for (let i = 0; i < CHANGES; i += 1) {
    const change = await publish(pool);
    published.push(change);
    if (!args.burst) await allAt(change.version);
  }
  await allAt(published.at(-1)!.version);
  const publishWallMs = performance.now() - publishStart;
  clearInterval(sampler);
  const afterPublish = procStats(cp.pid);
  const pushes = nodes.reduce((sum, n) => sum + n.pushes, 0) - pushesBefore;
  const latencies = published.flatMap((p) => nodes.map((n) => n.appliedAt(p.version)! - p.committedAt)).sort((a, b) => a - b);

  const cpuPublish = afterPublish.cpuSeconds - afterConnect.cpuSeconds;
  const cpuConnect = afterConnect.cpuSeconds - before.cpuSeconds;
  const out = [
    '',
    `config push: ${NODES} nodes, ${CHANGES} changes (${args.burst ? 'burst' : 'sequential'}), ${KEYS} API keys; bundle ${((nodes[0]?.bundleBytes ?? 0) / 1024).toFixed(0)} KiB`,
    `control plane: zenova-control pid ${cp.pid} (child process, loopback TLS); CPU from /proc (${os.cpus().length} cores)`,
    '',
    row(['phase', 'p50 ms', 'p99 ms', 'max ms', 'pushes', 'wall s', 'cp CPU s', 'cp CPU %']),
    row(['connect → first applied', ms(percentile(initial, 50)), ms(percentile(initial, 99)), ms(initial.at(-1) ?? Number.NaN), NODES, (connectMs / 1000).toFixed(2), cpuConnect.toFixed(2), ((cpuConnect / (connectMs / 1000)) * 100).toFixed(0)]),
    row(['publish → applied', ms(percentile(latencies, 50)), ms(percentile(latencies, 99)), ms(latencies.at(-1) ?? Number.NaN), pushes, (publishWallMs / 1000).toFixed(2), cpuPublish.toFixed(2), ((cpuPublish / (publishWallMs / 1000)) * 100).toFixed(0)]),
    '',
    row(['control plane memory', 'RSS MiB', 'peak MiB', 'VmHWM MiB']),
    row(['after publishing', mib(afterPublish.rssBytes), mib(peakRss), mib(afterPublish.peakRssBytes)]),
    '',
  ];
  process.stdout.write(out.join('\n'));
}

let exitCode = 0;
try {
  await main();
} catch (err) {
  process.stderr.write(`bench:config failed: ${err instanceof Error ? err.message : String(err)}\n`);
  if (problems.length > 0) process.stderr.write(`the control plane's last warnings and errors (${problems.length} in all):\n${problems.slice(-10).join('\n')}\n`);
  exitCode = 1;
} finally {
  for (const cleanup of cleanups.reverse()) {
    try {
      await cleanup();
    } catch (err) {
      process.stderr.write(`cleanup: ${err instanceof Error ? err.message : String(err)}\n`);
    }
  }
}
process.exit(exitCode);
