/**
 * `npm start`: the one-host dev stack (DESIGN §12). Starts PostgreSQL (embedded unless
 * ZENOVA_DATABASE_URL names another server than the stack's own), the control plane, a clearly
 * labelled demo upstream and the central node `office-primary`; prints the Base URL, a demo API
 * key and a ready curl; writes `.zenova/dev.env`; reuses everything on the next start; stops every
 * child on Ctrl-C.
 *
 * Environment: ZENOVA_DEV_HOME (default <repo>/.zenova), ZENOVA_DATABASE_URL (use that database
 * instead of the embedded one; the embedded one's own URL, as dev.env exports it, still starts the
 * embedded one), ZENOVA_DEV_PORTS=auto (pick free ports on a first run; tests).
 */
import { createWriteStream, mkdirSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startDevChild, type DevChild } from './child-process.js';
import { createDemoUpstream } from './demo-upstream.js';
import { ensureDevTls } from './dev-tls.js';
import { adminClient, ensureNodeEnrolled } from './office-primary.js';
import { ensureDemoConfig } from './demo-config.js';
import { chooseDatabase, embeddedDatabaseUrl, EMBEDDED_DB_USER } from './database-choice.js';
import { describeNodeConfig, nodeConfigStatus } from './node-config-status.js';
import { nodeChildEnv, type DEV_ENV_VARIABLES } from './node-child-env.js';
import { loadOrCreateDevState, saveDevState } from './dev-state.js';
import { choosePostgresDataDir } from './postgres-data-dir.js';
import { postgresUser, reachableBy, startLocalPostgres, type LocalPostgres } from './local-postgres.js';
import { writeFileAtomic } from '../fs/atomic-write.js';
import { describeDatabaseTarget } from '../db/pool.js';
import { CENTRAL_NODE_NAME } from '../nodes/node-validation.js';

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const NODE_NAME = CENTRAL_NODE_NAME;

function say(line = ''): void {
  process.stdout.write(`${line}\n`);
}

/** The cluster's dir (postgres-data-dir.ts); `freshState`: the dev state is being created now. */
function postgresDataDir(home: string, freshState: boolean): string {
  const user = postgresUser();
  const choice = choosePostgresDataDir(home, { freshState, homeReachable: !user || reachableBy(home, user) });
  if (choice.removedLeftover) say(`  removed a PostgreSQL cluster left by an earlier checkout at this path (${choice.dir})`);
  return choice.dir;
}


async function main(): Promise<void> {
  const home = resolve(process.env.ZENOVA_DEV_HOME ?? join(repoRoot, '.zenova'));
  // The home stays traversable (0755) so the unprivileged postgres user can reach its data dir in
  // it; the secrets inside are 0600 files and the logs dir is private.
  mkdirSync(home, { recursive: true, mode: 0o755 });
  mkdirSync(join(home, 'logs'), { recursive: true, mode: 0o700 });
  mkdirSync(join(home, NODE_NAME), { recursive: true, mode: 0o700 });
  const portMode = process.env.ZENOVA_DEV_PORTS === 'auto' ? 'auto' : 'default';
  const { state, created, movedPorts } = await loadOrCreateDevState(home, portMode, (freshState) => postgresDataDir(home, freshState));
  const show = (p: string): string => (p.startsWith(repoRoot) ? relative(repoRoot, p) || '.' : p);
  say(`Zenova Gateway dev stack — ${created ? 'first start, creating' : 'reusing'} ${show(home)}`);
  for (const m of movedPorts) say(`  port in use, moved: ${m}`);

  let pg: LocalPostgres | undefined;
  /** PostgreSQL from the moment its process exists, before `pg` is set once it is ready. */
  let pgSpawned: Pick<LocalPostgres, 'exited' | 'stopNow'> | undefined;
  const children: DevChild[] = [];
  let demo: ReturnType<typeof createDemoUpstream> | undefined;
  let stopping = false;
  let stopped: Promise<never> | undefined;
  // One shutdown, however many signals arrive: Ctrl-C under `npm start` delivers SIGINT both
  // directly and relayed by tsx, and a second call must not exit before the children are down.
  const stopAll = (code: number): Promise<never> =>
    (stopped ??= (async () => {
      stopping = true;
      say('stopping the dev stack…');
      for (const c of [...children].reverse()) await c.stop().catch(() => undefined);
      await demo?.close().catch(() => undefined);
      if (pg) await pg.stop().catch(() => undefined);
      else if (pgSpawned) {
        pgSpawned.stopNow();
        await pgSpawned.exited;
      }
      say('stopped.');
      process.exit(code);
    })());
  // The children lead process groups of their own (child-process.ts), so these signals reach only
  // the dev stack, which stops the node first, then the control plane (still there to confirm the
  // node's lease return), then PostgreSQL. A closed terminal's SIGHUP no longer reaches the children
  // either: it stops the stack the same way.
  process.on('SIGINT', () => void stopAll(0));
  process.on('SIGTERM', () => void stopAll(0));
  process.on('SIGHUP', () => void stopAll(0));
  // On any exit that skipped stopAll (an uncaught error): the TypeScript children stop by themselves
  // (exit-with-dev-stack.ts); PostgreSQL, a native binary, is told here. Limit: a dev stack killed
  // with SIGKILL leaves PostgreSQL running, and the next start reports its data dir as in use
  // (postmaster.pid names the process to stop).
  process.on('exit', () => pgSpawned?.stopNow());

  try {
    const database = chooseDatabase(process.env.ZENOVA_DATABASE_URL, state.databasePassword);
    let databaseUrl: string;
    let dbLabel = 'ZENOVA_DATABASE_URL';
    if (database.kind === 'external') {
      databaseUrl = database.url;
      say(`  using the PostgreSQL in ZENOVA_DATABASE_URL (${describeDatabaseTarget(databaseUrl)}); unset it for the embedded one`);
    } else {
      if (process.env.ZENOVA_DATABASE_URL) say('  ZENOVA_DATABASE_URL is this stack\'s own embedded database (as in dev.env); starting it');
      const dataDir = state.postgresDataDir ?? postgresDataDir(home, false);
      const pgLog = join(home, 'logs', 'postgres.log');
      const pgLogStream = createWriteStream(pgLog, { flags: 'a' });
      say(`  starting PostgreSQL on 127.0.0.1:${state.ports.postgres} (data: ${show(dataDir)})`);
      pg = await startLocalPostgres({ dataDir, port: state.ports.postgres, superuser: EMBEDDED_DB_USER, password: state.databasePassword, log: (l) => pgLogStream.write(`${l}\n`), onSpawned: (server) => (pgSpawned = server) });
      void pg.exited.then((code) => { if (!stopping) { say(`PostgreSQL exited unexpectedly (exit ${code}); see ${show(pgLog)}`); void stopAll(1); } });
      databaseUrl = embeddedDatabaseUrl(state.databasePassword, state.ports.postgres);
      dbLabel = `embedded PostgreSQL (${pg.binaries.source})`;
    }

    const tls = await ensureDevTls(home);
    say(`  starting the control plane on https://127.0.0.1:${state.ports.controlPlane} (node gateway :${state.ports.gateway})`);
    const cp = await startDevChild({
      name: 'control plane',
      entry: join(repoRoot, 'control-plane/src/main.ts'),
      args: [],
      cwd: repoRoot,
      env: {
        ...process.env,
        ZENOVA_DATABASE_URL: databaseUrl,
        ZENOVA_LISTEN: `127.0.0.1:${state.ports.controlPlane}`,
        ZENOVA_ADMIN_TOKEN: state.adminToken,
        ZENOVA_SECRET_ENC_KEY: state.secretEncKey,
        ZENOVA_TLS_CERT_FILE: tls.certFile,
        ZENOVA_TLS_KEY_FILE: tls.keyFile,
        ZENOVA_GATEWAY_LISTEN: `127.0.0.1:${state.ports.gateway}`,
        ZENOVA_GATEWAY_HOSTS: 'localhost,127.0.0.1',
        ZENOVA_GATEWAY_TLS_DIR: join(home, 'gateway-tls'),
      },
      logFile: join(home, 'logs', 'control-plane.log'),
      readyMsg: 'control plane listening',
    });
    children.push(cp);
    const cpUrl = String(cp.ready.url);

    demo = createDemoUpstream();
    const demoAddr = await demo.listen(state.ports.demoUpstream, '127.0.0.1');
    say(`  demo upstream (echoes prompts; NOT a real model) on ${demoAddr.url}`);

    const stateDir = join(home, NODE_NAME, 'state');
    const api = adminClient(cpUrl, state.adminToken, tls.caPem);
    let demoKey: string;
    try {
      const key = await ensureDemoConfig(api, demoAddr.url, { apiKey: state.demoApiKey, apiKeyId: state.demoApiKeyId });
      demoKey = key.apiKey;
      if (key.apiKeyId !== state.demoApiKeyId) saveDevState(home, { ...state, demoApiKey: key.apiKey, demoApiKeyId: key.apiKeyId });
      await ensureNodeEnrolled({ api, name: NODE_NAME, address: '127.0.0.1', controlPlaneUrl: cpUrl, caPem: tls.caPem, caFile: tls.caFile, stateDir, repoRoot, log: say });
    } finally {
      await api.close();
    }
    say(`  starting node ${NODE_NAME} on 127.0.0.1:${state.ports.node}`);
    const node = await startDevChild({
      name: `node ${NODE_NAME}`,
      entry: join(repoRoot, 'edge-node/src/main.ts'),
      args: ['serve', '--state-dir', stateDir, '--listen', `127.0.0.1:${state.ports.node}`],
      cwd: repoRoot,
      env: nodeChildEnv(process.env),
      logFile: join(home, 'logs', `${NODE_NAME}.log`),
      readyMsg: 'node-edge listening',
    });
    children.push(node);
    for (const c of children) {
      void c.exited.then((code) => { if (!stopping) { say(`${c.name} exited unexpectedly (exit ${code}):\n${c.tail()}`); void stopAll(1); } });
    }

    // A restarted node serves from its config cache at once; only one without a config is waited on.
    const nodeConfig = await nodeConfigStatus(node, 30_000);
    if (!nodeConfig) say(`  warning: ${NODE_NAME} has not received its config from the control plane yet (see its log)`);
    const baseUrl = `${String(node.ready.url)}/v1`;
    const env: Record<(typeof DEV_ENV_VARIABLES)[number], string> = {
      ZENOVA_BASE_URL: baseUrl,
      ZENOVA_API_KEY: demoKey,
      ZENOVA_CONSOLE_URL: `${cpUrl}/console/`,
      ZENOVA_CONTROL_PLANE_URL: cpUrl,
      ZENOVA_ADMIN_TOKEN: state.adminToken,
      ZENOVA_DATABASE_URL: databaseUrl,
      ZENOVA_CA_FILE: tls.caFile,
    };
    const envFile = join(home, 'dev.env');
    writeFileAtomic(envFile, Object.entries(env).map(([k, v]) => `${k}=${v}`).join('\n') + '\n', 0o600);
    const curl = `curl -sS -i ${baseUrl}/chat/completions -H 'Authorization: Bearer ${demoKey}' -H 'Content-Type: application/json' -d '{"model":"demo-echo","messages":[{"role":"user","content":"hello from curl"}]}'`;
    say();
    say('Zenova Gateway dev stack is up.');
    say(`  Base URL          ${baseUrl}   (node ${NODE_NAME}, ${describeNodeConfig(nodeConfig)})`);
    say(`  Demo API key      ${demoKey}`);
    say(`  Models            demo-echo, demo-embed   → demo upstream ${demoAddr.url} [DEMO: echoes your prompt, no real model]`);
    say(`  Control plane     ${cpUrl}   (admin API; GET /api/version, /healthz; npm run zenova -- gateway-node list)`);
    say(`  Console           ${cpUrl}/console/   (log in with the admin token below, also in ${show(envFile)}; trust the CA certificate below in the browser)`);
    say(`  CA certificate    ${show(tls.caFile)}   (verifies the control plane's HTTPS; pass it as --ca-file when enrolling nodes)`);
    say(`  Admin token       ${state.adminToken}`);
    say(`  Database          ${dbLabel}`);
    say(`  Settings          ${show(envFile)}   Logs: ${show(join(home, 'logs'))}/`);
    say();
    say('Try it:');
    say(`  ${curl}`);
    say();
    say('Ctrl-C stops everything.');
    say(JSON.stringify({ msg: 'dev stack ready', pids: { controlPlane: cp.child.pid, node: node.child.pid, postgres: pg?.pid ?? null } }));
  } catch (err) {
    say(`dev stack failed to start: ${(err as Error).message}`);
    await stopAll(1);
  }
}

await main();
