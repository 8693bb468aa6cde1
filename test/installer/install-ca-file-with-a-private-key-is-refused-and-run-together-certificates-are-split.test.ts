/**
 * `zenova install node --ca-file F`: a file holding the CA certificate and a private key (a cert+key
 * bundle) is NODE-CP-CA-FILE before anything is written, the probe or the enrollment is run, and
 * the key is never printed; two certificates concatenated without a newline between them
 * (`-----END CERTIFICATE----------BEGIN CERTIFICATE-----`) are split and installed as both.
 */
import t from 'tap';
import { X509Certificate } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { runInstall } from '../../installer/src/commands/install.js';
import type { ControlPlaneProbe } from '../../installer/src/install/control-plane-probe.js';
import type { Enroller } from '../../installer/src/install/install-node.js';
import { createTestCa } from '../fixtures/tls.js';
import { captureCli, fakeEnroller, fakeServices, healthyControlPlane, hostEnv, listTree } from './fake-host.js';
import { buildNodePackage, releaseKeys } from './package-builder.js';

const keys = releaseKeys();
const work = mkdtempSync(join(tmpdir(), 'zn-ca-key-work-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));
const CA_FILE = 'opt/zenova-node/etc/control-plane-ca.pem';

interface Run {
  exit: number;
  out: string;
  root: string;
  changed: boolean;
  /** The CA PEM each probe and enrollment was handed. */
  probed: Array<string | undefined>;
  enrolled: Array<string | undefined>;
}

async function install(caFile: string, extra: string[] = []): Promise<Run> {
  const pkg = await buildNodePackage(work, keys);
  const root = mkdtempSync(join(tmpdir(), 'zn-ca-key-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  mkdirSync(join(root, 'etc/systemd/system'), { recursive: true });
  const before = listTree(root);
  const probed: Array<string | undefined> = [];
  const enrolled: Array<string | undefined> = [];
  const healthy = healthyControlPlane();
  const probe: ControlPlaneProbe = async (url, caPem, file) => {
    probed.push(caPem);
    return healthy(url, caPem, file);
  };
  const enroll: Enroller = async (opts) => {
    enrolled.push(opts.caPem);
    return fakeEnroller(opts);
  };
  const cli = captureCli(work);
  const exit = await runInstall(
    ['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--token-file', '-', '--ca-file', caFile, ...extra],
    { ...cli.ctx, stdin: Readable.from([Buffer.from('zn_it_CAKEYTOKEN1\n')]) },
    hostEnv(root, { keyPem: keys.publicKeyPem, services: fakeServices(root), probeControlPlane: probe, enroll }),
  );
  return { exit, out: cli.out() + cli.err(), root, changed: JSON.stringify(listTree(root)) !== JSON.stringify(before), probed, enrolled };
}

/** The base64 lines of a PEM's body: none of them may be printed. */
function bodyLines(pem: string): string[] {
  return pem.split('\n').filter((line) => line !== '' && !line.startsWith('-----'));
}

t.test('a --ca-file holding the CA certificate and its private key is NODE-CP-CA-FILE: nothing written, probed or enrolled, the key not printed', async (t) => {
  const ca = await createTestCa();
  for (const [name, text] of [
    ['certificate then key', `${ca.certPem}${ca.keyPem}`],
    ['key then certificate', `${ca.keyPem}${ca.certPem}`],
    ['certificate then an RSA PRIVATE KEY block', `${ca.certPem}${ca.keyPem.replaceAll('PRIVATE KEY', 'RSA PRIVATE KEY')}`],
    ['certificate then an ENCRYPTED PRIVATE KEY block', `${ca.certPem}${ca.keyPem.replaceAll('PRIVATE KEY', 'ENCRYPTED PRIVATE KEY')}`],
  ] as const) {
    const file = join(work, `bundle-${name.replaceAll(' ', '-')}.pem`);
    writeFileSync(file, text);
    for (const extra of [[], ['--check-only']]) {
      const what = `${name}${extra.length > 0 ? ' (--check-only)' : ''}`;
      const r = await install(file, extra);
      t.equal(r.exit, 1, `${what}: exit 1`);
      t.match(r.out, `✗ NODE-CP-CA-FILE: --ca-file ${file} holds a private key beside its certificate: nothing was written\n`, `${what}: the finding says so`);
      t.match(r.out, `openssl x509 -in ${file} -out ca.crt`, `${what}: the advice says how to take the certificate alone`);
      t.match(r.out, /nothing was written/);
      for (const line of bodyLines(ca.keyPem)) t.notOk(r.out.includes(line), `${what}: no line of the key is printed`);
      t.equal(r.changed, false, `${what}: nothing written`);
      t.same(r.probed, [], `${what}: the control plane probe was not handed the file`);
      t.same(r.enrolled, [], `${what}: no enrollment`);
    }
  }
});

t.test('two CA certificates concatenated without a newline between them are installed as both, each on its own lines', async (t) => {
  const a = await createTestCa();
  const b = await createTestCa();
  const file = join(work, 'run-together.pem');
  writeFileSync(file, `${a.certPem.trimEnd()}${b.certPem}`);
  t.match(readFileSync(file, 'utf8'), '-----END CERTIFICATE----------BEGIN CERTIFICATE-----', 'the blocks run together');
  const r = await install(file);
  t.equal(r.exit, 0, r.out);
  t.notMatch(r.out, /NODE-CP-CA-FILE/);
  const expected = `${a.certPem.trimEnd()}\n${b.certPem}`;
  t.same(r.probed, [expected], 'the probe trusts both certificates');
  t.same(r.enrolled, [expected], 'the enrollment trusts both certificates');
  const installed = readFileSync(join(r.root, CA_FILE), 'utf8');
  t.equal(installed, expected, `${CA_FILE} holds both, each on its own lines`);
  t.equal(new X509Certificate(installed).subject, new X509Certificate(a.certPem).subject, 'the installed file parses');
});
