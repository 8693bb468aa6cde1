/**
 * What the dev stack keeps between runs in its home (.zenova/): secrets and ports, so a second
 * `npm start` reuses the same database, admin token, demo API key and URLs.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { z } from 'zod';
import { writeFileAtomic } from '../fs/atomic-write.js';

const portsSchema = z.object({
  postgres: z.number().int().min(1).max(65535),
  controlPlane: z.number().int().min(1).max(65535),
  node: z.number().int().min(1).max(65535),
  demoUpstream: z.number().int().min(1).max(65535),
  /** Added after the first release of the dev stack; filled in on the next start when absent. */
  gateway: z.number().int().min(1).max(65535).optional(),
});

const devStateSchema = z.object({
  version: z.literal(1),
  adminToken: z.string().min(32),
  /** The demo API key's secret as the control plane returned it once, and its id. */
  demoApiKey: z.string().min(32).optional(),
  demoApiKeyId: z.string().min(1).optional(),
  databasePassword: z.string().min(16),
  secretEncKey: z.string().min(40),
  /** Fixed at first start, so a rerun never silently starts an empty cluster elsewhere. */
  postgresDataDir: z.string().min(1).optional(),
  ports: portsSchema,
});

export type DevState = z.infer<typeof devStateSchema>;
export type DevPorts = Required<z.infer<typeof portsSchema>>;

/** The ports a first run asks for; any that is taken is replaced by a free one. */
export const DEFAULT_PORTS: DevPorts = { postgres: 7432, controlPlane: 7400, node: 7480, demoUpstream: 7490, gateway: 8443 };

export function isPortFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
  });
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      srv.close(() => (addr && typeof addr === 'object' ? resolve(addr.port) : reject(new Error('no port'))));
    });
  });
}

const secret = (prefix: string): string => `${prefix}${randomBytes(32).toString('base64url')}`;

/**
 * Load the state from `home`, or create it. `preferredPorts` are tried first (the stored ones on a
 * rerun, the defaults on a first run; `auto` picks free ports for everything, which tests use).
 */
export async function loadOrCreateDevState(
  home: string,
  portMode: 'default' | 'auto',
  choosePostgresDataDir: (freshState: boolean) => string,
): Promise<{ state: DevState & { ports: DevPorts }; created: boolean; movedPorts: string[] }> {
  const file = join(home, 'dev-state.json');
  let state: DevState | undefined;
  if (existsSync(file)) {
    const parsed = devStateSchema.safeParse(JSON.parse(readFileSync(file, 'utf8')));
    if (!parsed.success) throw new Error(`${file} is not a dev stack state file (${parsed.error.issues[0]?.message}); move it away to start afresh`);
    state = parsed.data;
  }
  const created = !state;
  const wanted: DevPorts = { ...DEFAULT_PORTS, ...state?.ports };
  const ports = { ...wanted };
  const movedPorts: string[] = [];
  for (const key of Object.keys(ports) as Array<keyof DevPorts>) {
    if (portMode === 'auto' && created) ports[key] = await freePort();
    else if (!(await isPortFree(ports[key]))) {
      ports[key] = await freePort();
      movedPorts.push(`${key} ${wanted[key]} → ${ports[key]}`);
    }
  }
  const next: DevState & { ports: DevPorts } = state
    ? { ...state, ports, postgresDataDir: state.postgresDataDir ?? choosePostgresDataDir(false) }
    : {
        version: 1,
        adminToken: secret('zn_admin_'),
        databasePassword: randomBytes(18).toString('base64url'),
        secretEncKey: randomBytes(32).toString('base64'),
        postgresDataDir: choosePostgresDataDir(true),
        ports,
      };
  saveDevState(home, next);
  return { state: next, created, movedPorts };
}

export function saveDevState(home: string, state: DevState): void {
  writeFileAtomic(join(home, 'dev-state.json'), `${JSON.stringify(state, null, 2)}\n`, 0o600);
}
