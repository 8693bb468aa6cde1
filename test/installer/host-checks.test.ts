/**
 * Every blocking host check of `zenova install node` (seed 004 §9.2/§9.4): one fault at a time on an
 * otherwise healthy fake host, each refused with its NODE-… code, exit 1 and not one byte written
 * under the host root. The control-plane checks run the real HTTPS probe against a local server.
 */
import t from 'tap';
import type { Test } from 'tap';
import { generateKeyPairSync } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer as createHttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { PROTOCOL_VERSION } from '../../proto/src/index.js';
import { productVersion } from '../../proto/src/product-version.js';
import { runInstall } from '../../installer/src/commands/install.js';
import { probeControlPlane } from '../../installer/src/install/control-plane-probe.js';
import type { GatewayProbe } from '../../installer/src/install/control-plane-probe.js';
import type { HostEnv } from '../../installer/src/host/host-env.js';
import { linuxHostProbe } from '../../installer/src/host/linux-host-probe.js';
import { freePort } from '../e2e/stack.js';
import { GiB, captureCli, fakePreflightServer, fakeProbe, fakeServices, glibcxxVersions, healthyControlPlane, hostEnv, listTree } from './fake-host.js';
import { buildNodePackage, flipByte, releaseKeys, writeSignedManifestPackage } from './package-builder.js';
import { createTestCa } from '../fixtures/tls.js';

const keys = releaseKeys();
const work = mkdtempSync(join(tmpdir(), 'zn-checks-work-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));

interface Case {
  name: string;
  code: string;
  /** Builds the host (given a fresh root) and the extra argv. */
  setup(root: string): Promise<{ host: Partial<HostEnv>; args?: string[]; pkg?: string }>;
  /** With a token (a real install attempt) instead of --check-only. */
  withToken?: boolean;
}

let goodPackage = '';

async function attempt(c: Case): Promise<{ exit: number; out: string; changed: boolean }> {
  const root = mkdtempSync(join(tmpdir(), 'zn-checks-root-'));
  try {
    mkdirSync(join(root, 'etc/systemd/system'), { recursive: true });
    const made = await c.setup(root);
    const host = hostEnv(root, { keyPem: keys.publicKeyPem, ...made.host });
    const before = listTree(root);
    const cli = captureCli(work);
    const exit = await runInstall(
      // A case's own --control-plane replaces the default (an option given twice is a usage error).
      ['node', '--package', made.pkg ?? goodPackage, ...(made.args?.includes('--control-plane') ? [] : ['--control-plane', 'https://cp.example.test']),
        ...(c.withToken ? ['--token', 'tok_never_used'] : ['--check-only']), ...(made.args ?? [])],
      cli.ctx,
      host,
    );
    return { exit, out: cli.out(), changed: JSON.stringify(listTree(root)) !== JSON.stringify(before) };
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

t.before(async () => {
  goodPackage = (await buildNodePackage(work, keys)).file;
});

t.test('a healthy host passes --check-only without a token and nothing is written', async (t) => {
  const r = await attempt({ name: 'healthy', code: '', setup: async () => ({ host: {} }) });
  t.equal(r.exit, 0, r.out);
  t.match(r.out, /All checks passed; nothing was written and no token was used/);
  t.notMatch(r.out, /✗/);
  t.equal(r.changed, false);
});

const unit = (dir: string): string => `[Service]\nEnvironmentFile=${dir}/etc/node.env\n`;

const CASES: Case[] = [
  { name: 'not root', code: 'NODE-HOST-ROOT', setup: async () => ({ host: { probe: fakeProbe({ isRoot: () => false }) } }) },
  { name: 'not Linux', code: 'NODE-HOST-OS', setup: async () => ({ host: { probe: fakeProbe({ os: () => 'darwin' }) } }) },
  { name: 'unsupported CPU', code: 'NODE-HOST-ARCH', setup: async () => ({ host: { probe: fakeProbe({ arch: () => 'armv7l' }) } }) },
  { name: 'package for another CPU', code: 'NODE-HOST-ARCH', setup: async () => ({ host: {}, pkg: (await buildNodePackage(work, keys, { name: 'arm.zpkg', arch: 'aarch64' })).file }) },
  { name: 'too little memory', code: 'NODE-HOST-MEMORY', setup: async () => ({ host: { probe: fakeProbe({ memoryBytes: async () => 512 * 1024 ** 2 }) } }) },
  { name: 'too little disk', code: 'NODE-HOST-DISK', setup: async () => ({ host: { probe: fakeProbe({ freeDiskBytes: async () => 0.5 * GiB }) } }) },
  { name: 'no systemd', code: 'NODE-HOST-SYSTEMD', setup: async () => ({ host: { probe: fakeProbe({ systemdRunning: async () => false }) } }) },
  { name: 'noexec mount', code: 'NODE-HOST-NOEXEC', setup: async () => ({ host: { probe: fakeProbe({ mountOf: async () => ({ mountPoint: '/opt', fsType: 'xfs', options: ['rw', 'noexec'] }) }) } }) },
  { name: 'SELinux label', code: 'NODE-HOST-SELINUX', setup: async () => ({ host: { probe: fakeProbe({ selinuxMode: async () => 'enforcing', selinuxType: async () => 'default_t' }) } }) },
  { name: 'AppArmor profile', code: 'NODE-HOST-APPARMOR', setup: async () => ({ host: { probe: fakeProbe({ apparmorEnforcedProfiles: async () => ['/usr/sbin/cupsd', '/opt/zenova-node/current/bin/zenova-node'] }) } }) },
  { name: 'install dir on a read-only mount', code: 'NODE-DIR-READ-ONLY', setup: async () => ({ host: { probe: fakeProbe({ mountOf: async () => ({ mountPoint: '/srv/ro', fsType: 'tmpfs', options: ['ro', 'relatime'] }) }) }, args: ['--install-dir', '/srv/ro/zenova-node'] }) },
  { name: 'install dir whose nearest existing dir refuses writes', code: 'NODE-DIR-READ-ONLY', setup: async () => ({ host: { probe: fakeProbe({ writeError: async () => ({ dir: '/srv', code: 'EROFS' }) }) }, args: ['--install-dir', '/srv/zenova-node'] }) },
  { name: 'port in use', code: 'NODE-PORT-IN-USE', setup: async () => ({ host: { probe: fakeProbe({ bindError: async () => 'EADDRINUSE' }) } }) },
  { name: 'control-plane host', code: 'NODE-HOST-CONTROL-PLANE', setup: async (root) => ({ host: { services: fakeServicesWith(root, 'zenova-control.service', '[Service]\n') } }) },
  { name: 'already installed', code: 'NODE-INSTALLED', setup: async (root) => ({ host: { services: fakeServicesWith(root, 'node-edge.service', unit('/data/zn')) } }) },
  { name: '--reenroll without an installation', code: 'NODE-REENROLL-NONE', withToken: true, setup: async () => ({ host: {}, args: ['--reenroll'] }) },
  { name: '--reenroll with another --install-dir than the installed one', code: 'NODE-DIR-MISMATCH', withToken: true, setup: async (root) => ({ host: { services: fakeServicesWith(root, 'node-edge.service', unit('/data/zn')) }, args: ['--reenroll', '--install-dir', '/data/other-node'] }) },
  {
    name: 'data left by an earlier install',
    code: 'NODE-DATA-EXISTS',
    setup: async (root) => {
      mkdirSync(join(root, 'opt/zenova-node/data'), { recursive: true });
      writeFileSync(join(root, 'opt/zenova-node/data/identity.json'), '{}');
      return { host: {} };
    },
  },
  {
    name: 'foreign files in the install dir',
    code: 'NODE-DIR-NOT-EMPTY',
    setup: async (root) => {
      mkdirSync(join(root, 'opt/zenova-node'), { recursive: true });
      writeFileSync(join(root, 'opt/zenova-node/notes.txt'), 'mine');
      return { host: {} };
    },
  },
  { name: 'tampered package (one byte)', code: 'NODE-PKG-CHECKSUM', withToken: true, setup: async () => {
    const pkg = (await buildNodePackage(work, keys, { name: 'tampered.zpkg' })).file;
    flipByte(pkg, -5);
    return { host: {}, pkg };
  } },
  { name: 'truncated package', code: 'NODE-PKG-FORMAT', withToken: true, setup: async () => {
    const pkg = (await buildNodePackage(work, keys, { name: 'truncated.zpkg' })).file;
    truncateSync(pkg, 100);
    return { host: {}, pkg };
  } },
  { name: 'genuine package of a newer release', code: 'NODE-PKG-NEWER', withToken: true, setup: async () => {
    const pkg = join(work, 'newer.zpkg');
    writeSignedManifestPackage(pkg, keys, { version: '9.1.0', requires: { glibc: '2.34', libatomic: '1.2' } });
    return { host: {}, pkg };
  } },
  { name: 'unsigned for this installer', code: 'NODE-PKG-SIGNATURE', withToken: true, setup: async () => ({ host: {}, pkg: (await buildNodePackage(work, releaseKeys(), { name: 'foreign-key.zpkg' })).file }) },
  { name: 'installer without a release key', code: 'NODE-PKG-SIGNATURE', setup: async () => ({ host: { trustedKeyPem: async () => undefined } }) },
  { name: 'another product', code: 'NODE-PKG-PRODUCT', setup: async () => ({ host: {}, pkg: (await buildNodePackage(work, keys, { name: 'other.zpkg', product: 'zenova-control' })).file }) },
  { name: 'another version than the control plane', code: 'NODE-PKG-VERSION', setup: async () => ({ host: { probeControlPlane: healthyControlPlane({ version: '99.0.0' }) } }) },
  { name: 'bad CA file', code: 'NODE-CP-CA-FILE', setup: async () => {
    writeFileSync(join(work, 'not-a-ca.pem'), 'hello');
    return { host: {}, args: ['--ca-file', join(work, 'not-a-ca.pem')] };
  } },
  { name: 'control plane URL not https', code: 'NODE-CP-URL', setup: async () => ({ host: { probeControlPlane }, args: ['--control-plane', 'http://cp.example.test'] }) },
];

function fakeServicesWith(root: string, name: string, text: string): ReturnType<typeof fakeServices> {
  mkdirSync(join(root, 'etc/systemd/system'), { recursive: true });
  writeFileSync(join(root, 'etc/systemd/system', name), text);
  return fakeServices(root);
}

for (const c of CASES) {
  t.test(`${c.name}: refused as ${c.code}, nothing written`, async (t) => {
    const r = await attempt(c);
    t.equal(r.exit, 1, 'exit 1');
    t.match(r.out, new RegExp(`✗ ${c.code}: `), `reported as ${c.code}`);
    t.match(r.out, /blocking finding.*nothing was written/);
    t.equal(r.changed, false, 'the host root is unchanged');
    if (c.code === 'NODE-INSTALLED') {
      t.match(r.out, /A gateway node is already installed on this host/);
      // The advice names the upgrade command (with its token), never a bare --upgrade.
      t.notMatch(r.out, /use --upgrade/);
      t.match(r.out, /To upgrade it, issue an upgrade command/);
    }
    if (c.code === 'NODE-DIR-READ-ONLY') t.match(r.out, /→ Remount that filesystem read-write .*or choose an install dir on a writable filesystem \(--install-dir\)/, 'the advice names both ways out');
    if (c.code === 'NODE-PKG-FORMAT') t.match(r.out, /→ Download the package again from the release site and check its SHA-256/, 'a damaged download is downloaded again');
    if (c.code === 'NODE-PKG-NEWER') {
      t.match(r.out, /✗ NODE-PKG-NEWER: .*its manifest \(release 9\.1\.0\): field requires\.libatomic\n +→ Run the command with \.\/zenova from the installer tarball of the package's release/, 'names the field and the release whose installer to use');
      t.notMatch(r.out, /Download the package again/, 'a genuine package is not downloaded again');
    }
    if (c.code === 'NODE-DIR-MISMATCH') t.notMatch(r.out, /NODE-DIR-NOT-EMPTY/, 'not reported as a dir with foreign files');
  });
}

t.test('the real control-plane probe: unreachable, untrusted, not a control plane, clock skew, protocol', async (t) => {
  const port = await freePort();
  const preflight = (over: Record<string, unknown> = {}) => () => ({ product: 'zenova-gateway', version: productVersion(), protocolVersion: PROTOCOL_VERSION, serverTime: new Date().toISOString(), serverTimeMs: Date.now(), ...over });
  const good = await fakePreflightServer(t, preflight());
  const skewed = await fakePreflightServer(t, preflight({ serverTimeMs: Date.now() + 10 * 60_000 }));
  const otherProtocol = await fakePreflightServer(t, preflight({ protocolVersion: PROTOCOL_VERSION + 1 }));
  const notZenova = await fakePreflightServer(t, () => undefined);
  const caFile = (pem: string, name: string): string => {
    writeFileSync(join(work, name), pem);
    return join(work, name);
  };
  const cases: Array<[string, string[], string | undefined]> = [
    ['a healthy control plane', ['--control-plane', good.url, '--ca-file', caFile(good.caPem, 'good.pem')], undefined],
    ['nothing listening', ['--control-plane', `https://127.0.0.1:${port}`], 'NODE-CP-UNREACHABLE'],
    ['a certificate the system store does not trust', ['--control-plane', good.url], 'NODE-CP-TLS'],
    ['an HTTPS server that is not a control plane', ['--control-plane', notZenova.url, '--ca-file', caFile(notZenova.caPem, 'nz.pem')], 'NODE-CP-NOT-ZENOVA'],
    ['a clock 10 minutes off', ['--control-plane', skewed.url, '--ca-file', caFile(skewed.caPem, 'skew.pem')], 'NODE-CLOCK-SKEW'],
    ['another protocol version', ['--control-plane', otherProtocol.url, '--ca-file', caFile(otherProtocol.caPem, 'proto.pem')], 'NODE-CP-PROTOCOL'],
  ];
  for (const [name, args, code] of cases) {
    const r = await attempt({ name, code: code ?? '', setup: async () => ({ host: { probeControlPlane }, args }) });
    if (code === undefined) {
      t.equal(r.exit, 0, `${name} passes: ${r.out}`);
    } else {
      t.equal(r.exit, 1, name);
      t.match(r.out, new RegExp(`✗ ${code}: `), `${name} → ${code}`);
    }
    t.equal(r.changed, false, `${name}: nothing written`);
  }
});

t.test('a damaged or empty release key is refused as NODE-PKG-SIGNATURE telling to unpack the installer again, not a crash', async (t) => {
  const damaged: Array<[string, string | undefined, (() => Promise<string | undefined>) | undefined]> = [
    ['cut', '-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n', undefined],
    ['empty', '', undefined],
    ['not a PEM', 'hello', undefined],
    ['another key type', generateKeyPairSync('ec', { namedCurve: 'P-256' }).publicKey.export({ type: 'spki', format: 'pem' }).toString(), undefined],
    ['unreadable', undefined, async () => { throw Object.assign(new Error('permission denied'), { code: 'EACCES' }); }],
  ];
  for (const [name, keyPem, trustedKeyPem] of damaged) {
    for (const withToken of [false, true]) {
      const r = await attempt({ name, code: 'NODE-PKG-SIGNATURE', withToken, setup: async () => ({ host: trustedKeyPem !== undefined ? { trustedKeyPem } : { trustedKeyPem: async () => keyPem } }) });
      t.equal(r.exit, 1, `${name}: exit 1`);
      t.match(r.out, /✗ NODE-PKG-SIGNATURE: the installer's release key \(installer\/release-signing-key\.pub\.pem\) is unreadable or damaged \(.+\): unpack the installer again\n +→ Unpack the installer tarball again/, `${name}: reported with the installer's fault`);
      t.notMatch(r.out, /Download the package again/, `${name}: the package is not blamed`);
      t.equal(r.changed, false, `${name}: nothing written`);
    }
  }
});

t.test('a plain-HTTP service on the control-plane URL\'s port is NODE-CP-NOT-HTTPS, with advice about the URL and not about --ca-file', async (t) => {
  const plain = createHttpServer((_req, res) => res.end('hello'));
  await new Promise<void>((resolve) => plain.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => plain.close(() => resolve())));
  const url = `https://127.0.0.1:${(plain.address() as AddressInfo).port}`;
  const r = await attempt({ name: 'plain http', code: 'NODE-CP-NOT-HTTPS', setup: async () => ({ host: { probeControlPlane }, args: ['--control-plane', url] }) });
  t.equal(r.exit, 1);
  t.match(r.out, /✗ NODE-CP-NOT-HTTPS: the control plane at 127\.0\.0\.1:\d+ did not speak TLS/);
  t.match(r.out, /NODE-CP-NOT-HTTPS: .*\n +→ The URL's port does not serve HTTPS: copy the --control-plane URL/);
  t.notMatch(r.out, /NODE-CP-TLS|--ca-file/, 'no advice about the CA');
  t.equal(r.changed, false);
});

t.test('an untrusted control-plane certificate is NODE-CP-TLS whose advice says what to do with no --ca-file or with one that did not sign it, never the cause again', async (t) => {
  const preflight = () => ({ product: 'zenova-gateway', version: productVersion(), protocolVersion: PROTOCOL_VERSION, serverTime: new Date().toISOString(), serverTimeMs: Date.now() });
  const server = await fakePreflightServer(t, preflight);
  const otherCa = join(work, 'other-ca.pem');
  writeFileSync(otherCa, (await createTestCa()).certPem);
  const finding = (out: string): { cause: string; advice: string } => {
    const m = /✗ NODE-CP-TLS: (.*)\n +→ (.*)\n/.exec(out);
    return { cause: m?.[1] ?? '', advice: m?.[2] ?? '' };
  };

  const none = await attempt({ name: 'no --ca-file', code: 'NODE-CP-TLS', setup: async () => ({ host: { probeControlPlane }, args: ['--control-plane', server.url] }) });
  t.equal(none.exit, 1);
  const withoutCa = finding(none.out);
  t.equal(withoutCa.cause, "the control plane's certificate is not trusted (checked against this host's system trust store)", 'the cause is the fact');
  t.match(withoutCa.advice, /^The control plane's certificate comes from a CA this host does not trust \(a private CA\): pass that CA with --ca-file FILE\. A command without --ca-file comes from a node created without the control plane's CA: set it on the node \(`PATCH \/api\/v1\/nodes\/NAME\/network` with `caPem`/);
  t.match(withoutCa.advice, /`zenova gateway-node install-command NAME --ca-out FILE`/, 'names a command and option that exist');
  t.notMatch(none.out, /the install command names it/, 'no claim that the command names a CA');

  const wrong = await attempt({ name: 'a --ca-file of another CA', code: 'NODE-CP-TLS', setup: async () => ({ host: { probeControlPlane }, args: ['--control-plane', server.url, '--ca-file', otherCa] }) });
  t.equal(wrong.exit, 1);
  const withCa = finding(wrong.out);
  t.equal(withCa.cause, `the control plane's certificate is not trusted (checked against --ca-file ${otherCa})`);
  t.match(withCa.advice, `${otherCa} is not the CA that signed the control plane's certificate: pass that CA with --ca-file`);
  for (const r of [withoutCa, withCa]) t.notOk(r.advice.includes(r.cause) || r.cause.includes(r.advice.slice(0, 40)), 'cause and advice differ');
  t.equal(none.changed || wrong.changed, false, 'nothing written');
});

t.test('a --listen address this host cannot bind (not its IP, a name that does not resolve) is refused as NODE-LISTEN-UNAVAILABLE before anything is written or the token used', async (t) => {
  // The real bind attempt; every other host fact stays healthy.
  const real = linuxHostProbe();
  const probe = fakeProbe({ bindError: (host, port) => real.bindError(host, port) });
  const cases: Array<[string, RegExp]> = [
    ['192.0.2.1:7480', /✗ NODE-LISTEN-UNAVAILABLE: node-edge cannot listen on 192\.0\.2\.1:7480 \(--listen\): binding it fails with EADDRNOTAVAIL: the address is not one of this host's\n +→ Pass --listen with an address of this host/],
    ['nosuch-host.invalid:7480', /✗ NODE-LISTEN-UNAVAILABLE: node-edge cannot listen on nosuch-host\.invalid:7480 \(--listen\): binding it fails with (ENOTFOUND|EAI_AGAIN): the name/],
  ];
  for (const [listen, message] of cases) {
    for (const withToken of [false, true]) {
      let enrolled = false;
      const r = await attempt({ name: listen, code: 'NODE-LISTEN-UNAVAILABLE', withToken, setup: async () => ({ host: { probe, enroll: async () => { enrolled = true; throw new Error('the token must not be used'); } }, args: ['--listen', listen] }) });
      t.equal(r.exit, 1, `${listen}${withToken ? '' : ' --check-only'}: exit 1`);
      t.match(r.out, message, `${listen}${withToken ? '' : ' --check-only'}: the finding names the address and the error`);
      t.notMatch(r.out, /NODE-PORT-IN-USE/, 'not reported as a port in use');
      t.match(r.out, /1 blocking finding; nothing was written/);
      t.equal(r.changed, false, `${listen}: nothing written`);
      t.equal(enrolled, false, `${listen}: the token was not used`);
    }
  }
  const port = await freePort();
  const free = await attempt({ name: 'loopback', code: '', setup: async () => ({ host: { probe }, args: ['--listen', `127.0.0.1:${port}`] }) });
  t.equal(free.exit, 0, `a free loopback port passes: ${free.out}`);
});

t.test('a glibc 2.31 host is refused as NODE-HOST-LIBC for a package whose native files need glibc 2.34 and GLIBCXX_3.4.29, before anything is written or the token used', async (t) => {
  const needy = (await buildNodePackage(work, keys, { name: 'needs-glibc-2.34.zpkg', requires: { glibc: '2.34', glibcxx: '3.4.29' } })).file;
  // Debian 11: glibc 2.31, GCC 10's libstdc++ (up to GLIBCXX_3.4.28).
  const bullseye = { glibcVersion: () => '2.31', libstdcxx: async () => ({ file: '/usr/lib/x86_64-linux-gnu/libstdc++.so.6', versions: glibcxxVersions(28) }) };
  const cases: Array<[string, Partial<ReturnType<typeof fakeProbe>>, RegExp[]]> = [
    ['glibc 2.31, libstdc++ up to GLIBCXX_3.4.28', bullseye, [
      /✗ NODE-HOST-LIBC: the package's native files \(its Node runtime, better-sqlite3\) need glibc ≥ 2\.34 and libstdc\+\+ with GLIBCXX_3\.4\.29; this host has glibc 2\.31\n +→ Install on a host whose glibc, libstdc\+\+ and libgcc_s meet the floor/,
      /✗ NODE-HOST-LIBC: .*; this host's \/usr\/lib\/x86_64-linux-gnu\/libstdc\+\+\.so\.6 lacks GLIBCXX_3\.4\.29 \(it provides up to GLIBCXX_3\.4\.28\)/,
    ]],
    ['a new enough glibc but no libstdc++', { libstdcxx: async () => undefined }, [/✗ NODE-HOST-LIBC: .*; this host has no libstdc\+\+\.so\.6/]],
    ['no glibc at all (musl)', { glibcVersion: () => undefined }, [/✗ NODE-HOST-LIBC: .*; this host's C library is not glibc/]],
  ];
  for (const [name, facts, messages] of cases) {
    for (const withToken of [false, true]) {
      let enrolled = false;
      const r = await attempt({ name, code: 'NODE-HOST-LIBC', withToken, setup: async () => ({ host: { probe: fakeProbe(facts), enroll: async () => { enrolled = true; throw new Error('the token must not be used'); } }, pkg: needy }) });
      const label = `${name}${withToken ? '' : ' --check-only'}`;
      t.equal(r.exit, 1, `${label}: exit 1`);
      for (const m of messages) t.match(r.out, m, `${label}: the finding names what the package needs and what the host has`);
      t.match(r.out, new RegExp(`${messages.length} blocking findings?; nothing was written`), `${label}: blocking`);
      t.equal(r.changed, false, `${label}: nothing written`);
      t.equal(enrolled, false, `${label}: the token was not used`);
    }
  }
  const fine = await attempt({ name: 'glibc 2.36', code: '', setup: async () => ({ host: {}, pkg: needy }) });
  t.equal(fine.exit, 0, `a host at or above the floor passes: ${fine.out}`);
  t.match(fine.out, /✓ C libraries: glibc 2\.36, GLIBCXX_3\.4\.30 \(the package needs glibc ≥ 2\.34 and libstdc\+\+ with GLIBCXX_3\.4\.29\)/);
  // A package built before the floor was recorded carries no `requires`: nothing to compare.
  const old = await attempt({ name: 'older package', code: '', setup: async () => ({ host: { probe: fakeProbe(bullseye) } }) });
  t.equal(old.exit, 0, `a package without a recorded floor is not checked: ${old.out}`);
  t.notMatch(old.out, /C libraries|NODE-HOST-LIBC/);
});

t.test('a host with 1 GiB of memory passes the memory check, though the kernel keeps part of it out of MemTotal', async (t) => {
  // MemTotal of a 1 GiB VM (Debian 12, x86_64): 1 GiB less what the kernel and firmware reserve.
  const r = await attempt({ name: '1 GiB VM', code: '', setup: async () => ({ host: { probe: fakeProbe({ memoryBytes: async () => 980_276 * 1024 }) } }) });
  t.equal(r.exit, 0, r.out);
  t.notMatch(r.out, /NODE-HOST-MEMORY/);
  t.match(r.out, /memory 957 MiB/);
});

t.test('all blocking findings are listed together, not just the first', async (t) => {
  const r = await attempt({
    name: 'several',
    code: '',
    setup: async () => ({ host: { probe: fakeProbe({ memoryBytes: async () => 1024, systemdRunning: async () => false, bindError: async () => 'EADDRINUSE' }) } }),
  });
  t.equal(r.exit, 1);
  t.match(r.out, /3 blocking findings; nothing was written/);
});

t.test('the install command run again on an installed host reports NODE-INSTALLED, not its own node\'s port as in use by another program', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'zn-checks-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  mkdirSync(join(root, 'data/zn/etc'), { recursive: true });
  writeFileSync(join(root, 'data/zn/etc/node.env'), 'ZENOVA_NODE_LISTEN=0.0.0.0:7480\n');
  // The installed node holds its port, as a real bind would find.
  const probe = fakeProbe({ bindError: async () => 'EADDRINUSE' });
  const run = async (listen: string): Promise<string> => {
    const cli = captureCli(work);
    const host = hostEnv(root, { keyPem: keys.publicKeyPem, probe, services: fakeServicesWith(root, 'node-edge.service', unit('/data/zn')) });
    t.equal(await runInstall(['node', '--package', goodPackage, '--control-plane', 'https://cp.example.test', '--check-only', '--listen', listen], cli.ctx, host), 1);
    return cli.out();
  };
  for (const listen of ['0.0.0.0:7480', '127.0.0.1:7480']) {
    const out = await run(listen);
    t.match(out, /✗ NODE-INSTALLED/, `${listen}: the installed node is the finding`);
    t.notMatch(out, /NODE-PORT-IN-USE/, `${listen}: its own port is not "in use by another program"`);
    t.match(out, new RegExp(`✓ port ${listen.replaceAll('.', '\\.')} is the installed node's own`));
    t.match(out, /1 blocking finding;/);
  }
  // Another port in use on that host is still another program's.
  t.match(await run('127.0.0.1:9000'), /✗ NODE-PORT-IN-USE: 127\.0\.0\.1:9000 is already in use by another program/);
});

t.test('without root, an install dir refusing writes (EACCES) is the missing root NODE-HOST-ROOT names, not advice to remount a file system', async (t) => {
  const r = await attempt({ name: 'not root, EACCES', code: 'NODE-HOST-ROOT', setup: async () => ({ host: { probe: fakeProbe({ isRoot: () => false, writeError: async () => ({ dir: '/srv', code: 'EACCES' }) }) }, args: ['--install-dir', '/srv/zenova-node'] }) });
  t.equal(r.exit, 1);
  t.match(r.out, /✗ NODE-HOST-ROOT: /);
  t.notMatch(r.out, /NODE-DIR-READ-ONLY|Remount/);
  const asRoot = await attempt({ name: 'root, EACCES', code: 'NODE-DIR-READ-ONLY', setup: async () => ({ host: { probe: fakeProbe({ writeError: async () => ({ dir: '/srv', code: 'EACCES' }) }) }, args: ['--install-dir', '/srv/zenova-node'] }) });
  t.match(asRoot.out, /✗ NODE-DIR-READ-ONLY: \/srv\/zenova-node cannot be written: \/srv refuses writes \(EACCES\)/, 'as root, EACCES is a file system refusing root');
});

/** Sets the proxy variables the checks read from this process's environment, put back after the test. */
function proxyVariables(t: Test, values: { https_proxy: string | undefined; no_proxy: string | undefined }): void {
  const saved = { https_proxy: process.env.https_proxy, no_proxy: process.env.no_proxy };
  t.teardown(() => {
    for (const [name, value] of Object.entries(saved)) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
  });
  for (const [name, value] of Object.entries(values)) {
    if (value === undefined) delete process.env[name];
    else process.env[name] = value;
  }
}

t.test('a control plane reached through a proxy blocks a first install until a drop-in gives node-edge the proxy (NODE-CP-PROXY-SERVICE), before the token is used', async (t) => {
  proxyVariables(t, { https_proxy: 'http://10.0.0.3:3128', no_proxy: undefined });
  const blocked = await attempt({ name: 'proxy, no drop-in', code: 'NODE-CP-PROXY-SERVICE', withToken: true, setup: async () => ({ host: {} }) });
  t.equal(blocked.exit, 1);
  t.match(blocked.out, /✗ NODE-CP-PROXY-SERVICE: this check reached the control plane through the proxy 10\.0\.0\.3:3128 \(https_proxy\), but node-edge\.service runs under systemd without this shell's variables/);
  t.match(blocked.out, /→ Nothing was changed and the token was not used\. Give node-edge the proxy first: create \/etc\/systemd\/system\/node-edge\.service\.d\/proxy\.conf/);
  t.equal(blocked.changed, false, 'nothing written');

  const withDropIn = await attempt({
    name: 'proxy, drop-in',
    code: '',
    setup: async (root) => {
      mkdirSync(join(root, 'etc/systemd/system/node-edge.service.d'), { recursive: true });
      writeFileSync(join(root, 'etc/systemd/system/node-edge.service.d/proxy.conf'), '[Service]\nEnvironment=https_proxy=http://10.0.0.3:3128\n');
      return { host: {} };
    },
  });
  t.equal(withDropIn.exit, 0, withDropIn.out);
  t.match(withDropIn.out, /✓ node-edge will reach the control plane through the proxy 10\.0\.0\.3:3128 \(https_proxy\) too/);

  process.env.no_proxy = 'cp.example.test';
  const direct = await attempt({ name: 'proxy bypassed', code: '', setup: async () => ({ host: {} }) });
  t.equal(direct.exit, 0, direct.out);
  t.notMatch(direct.out, /through the proxy/, 'no_proxy takes the control plane out of it');
});

t.test('a node gateway reached through a proxy while the control plane is reached directly blocks a first install until a drop-in gives node-edge the proxy (NODE-CP-PROXY-SERVICE)', async (t) => {
  // The control plane's HTTPS goes direct; its gateway, another name, through the proxy.
  proxyVariables(t, { https_proxy: 'http://10.0.0.3:3128', no_proxy: 'cp.example.test' });
  const gateway = { target: 'gw.example.test:8443', serverName: 'gw.example.test', caPem: '' };
  const probeGateway: GatewayProbe = async (g) => ({ ok: true, label: `node gateway ${g.target} reachable over TCP and TLS (stand-in)` });
  const host = { probeControlPlane: healthyControlPlane({ gateway }), probeGateway };
  const blocked = await attempt({ name: 'gateway by proxy, no drop-in', code: 'NODE-CP-PROXY-SERVICE', withToken: true, setup: async () => ({ host }) });
  t.equal(blocked.exit, 1, blocked.out);
  t.match(blocked.out, /✗ NODE-CP-PROXY-SERVICE: this check reached the node gateway through the proxy 10\.0\.0\.3:3128 \(https_proxy\), but node-edge\.service runs under systemd without this shell's variables/);
  t.equal(blocked.changed, false, 'nothing written, the token not used');

  const withDropIn = await attempt({
    name: 'gateway by proxy, drop-in',
    code: '',
    setup: async (root) => {
      mkdirSync(join(root, 'etc/systemd/system/node-edge.service.d'), { recursive: true });
      writeFileSync(join(root, 'etc/systemd/system/node-edge.service.d/proxy.conf'), '[Service]\nEnvironment=https_proxy=http://10.0.0.3:3128\n');
      return { host };
    },
  });
  t.equal(withDropIn.exit, 0, withDropIn.out);
  t.match(withDropIn.out, /✓ node-edge will reach the node gateway through the proxy 10\.0\.0\.3:3128 \(https_proxy\) too/);

  process.env.no_proxy = 'cp.example.test,gw.example.test';
  const direct = await attempt({ name: 'both direct', code: '', setup: async () => ({ host }) });
  t.equal(direct.exit, 0, direct.out);
  t.notMatch(direct.out, /through the proxy/, 'no_proxy takes both out of it');
});
