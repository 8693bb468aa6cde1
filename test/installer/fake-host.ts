/**
 * Test doubles for the installer's host: a temp host root, a HostProbe whose every fact can be
 * set (default: a healthy x86_64 systemd host), a ServiceManager that keeps unit files under the
 * host root and records systemctl calls (optionally running a real node on start), a fake HTTPS
 * "control plane" preflight, and a listing of the whole root to prove nothing was written.
 */
import { createServer } from 'node:https';
import type { Server } from 'node:https';
import { generateKeyPairSync } from 'node:crypto';
import { mkdirSync, readdirSync, lstatSync, readFileSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { join, relative } from 'node:path';
import { PROTOCOL_VERSION } from '../../proto/src/index.js';
import { productVersion } from '../../proto/src/product-version.js';
import type { HostProbe } from '../../installer/src/host/host-probe.js';
import type { RestartRecord, ServiceManager, ServiceState } from '../../installer/src/host/service-manager.js';
import { systemdServiceManager } from '../../installer/src/host/systemd-service-manager.js';
import type { HostEnv } from '../../installer/src/host/host-env.js';
import type { CliContext } from '../../installer/src/cli-context.js';
import type { ControlPlaneFacts, ControlPlaneProbe } from '../../installer/src/install/control-plane-probe.js';
import type { Enroller } from '../../installer/src/install/install-node.js';
import { createTestCa, issueServerCert } from '../fixtures/tls.js';

export const GiB = 1024 ** 3;

/** GLIBCXX_3.4, GLIBCXX_3.4.1 … GLIBCXX_3.4.<upTo>, as a libstdc++ of that age defines them. */
export function glibcxxVersions(upTo: number): string[] {
  return ['GLIBCXX_3.4', ...Array.from({ length: upTo }, (_v, i) => `GLIBCXX_3.4.${i + 1}`)];
}

/** CXXABI_1.3, CXXABI_1.3.1 … CXXABI_1.3.<upTo>, as a libstdc++ of that age defines them. */
export function cxxabiVersions(upTo: number): string[] {
  return ['CXXABI_1.3', ...Array.from({ length: upTo }, (_v, i) => `CXXABI_1.3.${i + 1}`)];
}

/** What GCC 12's libgcc_s.so.1 defines on x86_64 (Debian 12). */
export const GCC_12_LIBGCC_S_VERSIONS = ['GCC_3.0', 'GCC_3.3', 'GCC_3.3.1', 'GCC_3.4', 'GCC_3.4.2', 'GCC_3.4.4', 'GCC_4.0.0', 'GCC_4.2.0', 'GCC_4.3.0', 'GCC_4.7.0', 'GCC_4.8.0', 'GCC_7.0.0', 'GCC_12.0.0'];

export function fakeProbe(over: Partial<HostProbe> = {}): HostProbe {
  return {
    os: () => 'linux',
    arch: () => 'x86_64',
    isRoot: () => true,
    memoryBytes: async () => 8 * GiB,
    freeDiskBytes: async () => 100 * GiB,
    mountOf: async () => ({ mountPoint: '/', fsType: 'ext4', options: ['rw', 'relatime'] }),
    systemdRunning: async () => true,
    selinuxMode: async () => 'disabled',
    selinuxType: async () => undefined,
    apparmorEnforcedProfiles: async () => [],
    bindError: async () => undefined,
    writeError: async () => undefined,
    // Debian 12's glibc, GCC 12's libstdc++ (GLIBCXX_3.4 … 3.4.30, CXXABI_1.3 … 1.3.13) and libgcc_s.
    glibcVersion: () => '2.36',
    libstdcxx: async () => ({ file: '/usr/lib/x86_64-linux-gnu/libstdc++.so.6', versions: [...glibcxxVersions(30), ...cxxabiVersions(13)] }),
    libgccS: async () => ({ file: '/lib/x86_64-linux-gnu/libgcc_s.so.1', versions: GCC_12_LIBGCC_S_VERSIONS }),
    ...over,
  };
}

export interface FakeServices extends ServiceManager {
  calls: string[];
  states: Map<string, ServiceState>;
  /** What restartRecord answers per unit (undefined when unset, as for a unit never started). */
  restartRecords: Map<string, RestartRecord>;
  /** What journalctl prints per unit (unset: one line naming the unit). */
  journals: Map<string, string>;
}

/** Unit files really written under `<root>/etc/systemd/system`; systemctl calls only recorded. */
export function fakeServices(root: string, hooks: { onStart?: (unit: string) => Promise<void>; onStop?: (unit: string) => Promise<void> } = {}): FakeServices {
  const unitDir = join(root, 'etc/systemd/system');
  mkdirSync(unitDir, { recursive: true });
  const files = systemdServiceManager(unitDir);
  const calls: string[] = [];
  const states = new Map<string, ServiceState>();
  const restartRecords = new Map<string, RestartRecord>();
  const journals = new Map<string, string>();
  return {
    calls,
    states,
    restartRecords,
    journals,
    readUnit: (n) => files.readUnit(n),
    writeUnit: async (n, text) => {
      calls.push(`write ${n}`);
      await files.writeUnit(n, text);
    },
    removeUnit: async (n) => {
      calls.push(`remove ${n}`);
      await files.removeUnit(n);
    },
    reload: async () => void calls.push('daemon-reload'),
    enable: async (n) => void calls.push(`enable ${n}`),
    disable: async (n) => void calls.push(`disable ${n}`),
    start: async (n) => {
      calls.push(`start ${n}`);
      states.set(n, 'active');
      await hooks.onStart?.(n);
    },
    stop: async (n) => {
      calls.push(`stop ${n}`);
      states.set(n, 'inactive');
      await hooks.onStop?.(n);
    },
    restart: async (n) => {
      calls.push(`restart ${n}`);
      states.set(n, 'inactive');
      await hooks.onStop?.(n);
      states.set(n, 'active');
      await hooks.onStart?.(n);
    },
    state: async (n) => states.get(n) ?? 'inactive',
    restartRecord: async (n) => restartRecords.get(n),
    journal: async (unit, opts, out) => {
      calls.push(`journal ${unit} ${JSON.stringify(opts)}`);
      out.write(journals.get(unit) ?? `journal of ${unit}\n`);
      return 0;
    },
  };
}

/** An enrollment stand-in that succeeds as node n1 (id-1), writing the node's identity.json. */
export const fakeEnroller: Enroller = async (opts) => {
  mkdirSync(opts.stateDir, { recursive: true, mode: 0o700 });
  const signing = generateKeyPairSync('ed25519').publicKey.export({ type: 'spki', format: 'pem' }).toString();
  writeFileSync(join(opts.stateDir, 'identity.json'), JSON.stringify({
    nodeId: 'id-1', nodeName: 'n1', controlPlaneUrl: 'https://cp.example.test', gateway: { target: 'gw.example.test:8443', serverName: 'gw.example.test' },
    configSigningPublicKeyPem: signing, enrolledAt: new Date().toISOString(),
  }));
  return { nodeId: 'id-1', nodeName: 'n1', controlPlaneUrl: opts.controlPlaneUrl, gatewayTarget: 'gw.example.test:8443', stateDir: opts.stateDir, reenrolled: false };
};

/** A control-plane probe that answers like a healthy control plane of this release. */
export function healthyControlPlane(over: { version?: string; protocolVersion?: number; skewMs?: number; gateway?: ControlPlaneFacts['gateway'] } = {}): ControlPlaneProbe {
  return async (url) => ({
    ok: true,
    facts: {
      url: new URL(url.endsWith('/') ? url : `${url}/`), version: over.version ?? productVersion(), protocolVersion: over.protocolVersion ?? PROTOCOL_VERSION, skewMs: over.skewMs ?? 0,
      ...(over.gateway !== undefined ? { gateway: over.gateway } : {}),
    },
  });
}

export function hostEnv(root: string, over: Partial<HostEnv> & { keyPem?: string } = {}): HostEnv {
  const { keyPem, ...rest } = over;
  return {
    hostRoot: root,
    probe: fakeProbe(),
    services: fakeServices(root),
    probeControlPlane: healthyControlPlane(),
    trustedKeyPem: async () => keyPem,
    waitReady: async () => ({ ready: true }),
    ...rest,
  };
}

export interface CapturedCli {
  ctx: CliContext;
  out(): string;
  err(): string;
}

export function captureCli(cwd: string): CapturedCli {
  let out = '';
  let err = '';
  return {
    ctx: { stdout: { write: (s: string) => (out += s) }, stderr: { write: (s: string) => (err += s) }, env: {}, cwd },
    out: () => out,
    err: () => err,
  };
}

/** Every path under `root` with its type, size and mode, and file contents hashed in: a snapshot. */
export function listTree(root: string): string[] {
  const out: string[] = [];
  const walk = (dir: string): void => {
    for (const name of readdirSync(dir).sort()) {
      const full = join(dir, name);
      const info = lstatSync(full);
      const rel = relative(root, full);
      if (info.isDirectory()) {
        out.push(`${rel}/ ${(info.mode & 0o7777).toString(8)}`);
        walk(full);
      } else {
        out.push(`${rel} ${info.size} ${(info.mode & 0o7777).toString(8)} ${info.isFile() ? readFileSync(full).toString('base64').slice(0, 40) : 'link'}`);
      }
    }
  };
  walk(root);
  return out;
}

/** An HTTPS server on 127.0.0.1:0 answering GET /api/enroll/preflight with `body()` (404 when undefined). */
export async function fakePreflightServer(t: { teardown(fn: () => unknown): void }, body: () => unknown): Promise<{ url: string; caPem: string }> {
  const ca = await createTestCa();
  const cert = await issueServerCert(ca, { ipAddresses: ['127.0.0.1'] });
  const server: Server = createServer({ cert: cert.certPem, key: cert.keyPem }, (req, res) => {
    const answer = req.url === '/api/enroll/preflight' ? body() : undefined;
    res.writeHead(answer === undefined ? 404 : 200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(answer ?? { error: 'not found' }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return { url: `https://127.0.0.1:${(server.address() as AddressInfo).port}`, caPem: ca.certPem };
}
