/**
 * `zenova-node enroll --ca-file F`: a file holding the CA certificate and a private key is refused
 * (exit 2) before anything is sent or created, in the words `gateway-node create --ca-file` uses,
 * and the key is never printed; two certificates concatenated without a newline between them are
 * split, so the file is read as the CA it is rather than as "no PEM certificate".
 */
import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { createTestCa } from '../fixtures/tls.js';
import { runNodeCli as run } from './cli-capture.js';

const TOKEN = 'zn_it_Q2FGaWxlV2l0aEFQcml2YXRlS2V5MDEyMzQ1Njc4OUFCQ0RF';
/** Port 9 (discard) is never asked: a refused file ends the command before any connection. */
const NO_CONTROL_PLANE = 'https://127.0.0.1:9';

t.test('an enroll --ca-file holding a private key beside its certificate is refused with exit 2, nothing created, the key not printed', async (t) => {
  const dir = t.testdir({});
  const ca = await createTestCa();
  for (const [name, text] of [
    ['cert-then-key', `${ca.certPem}${ca.keyPem}`],
    ['key-then-cert', `${ca.keyPem}${ca.certPem}`],
    ['cert-then-ec-key', `${ca.certPem}${ca.keyPem.replaceAll('PRIVATE KEY', 'EC PRIVATE KEY')}`],
  ] as const) {
    const file = path.join(dir, `${name}.pem`);
    await writeFile(file, text);
    const stateDir = path.join(dir, `state-${name}`);
    const result = await run(['enroll', '--control-plane', NO_CONTROL_PLANE, '--token', TOKEN, '--ca-file', file, '--state-dir', stateDir]);
    t.equal(result.code, 2, `${name}: exit 2`);
    t.equal(result.stderr, `zenova-node: --ca-file ${file} holds a private key beside its certificate: nothing was sent; pass a file with the CA certificate only (e.g. openssl x509 -in ${file} -out ca.crt)\n`, `${name}: the message`);
    for (const line of ca.keyPem.split('\n').filter((l) => l !== '' && !l.startsWith('-----'))) t.notOk(result.stderr.includes(line) || result.stdout.includes(line), `${name}: no line of the key printed`);
    t.notOk(existsSync(stateDir), `${name}: no state dir created`);
  }
});

t.test('an enroll --ca-file of two certificates run together is read as a CA: the run goes on to the control plane', async (t) => {
  const dir = t.testdir({});
  const a = await createTestCa();
  const b = await createTestCa();
  const file = path.join(dir, 'run-together.pem');
  await writeFile(file, `${a.certPem.trimEnd()}${b.certPem}`);
  const result = await run(['enroll', '--control-plane', NO_CONTROL_PLANE, '--token', TOKEN, '--ca-file', file, '--state-dir', path.join(dir, 's')]);
  t.notMatch(result.stderr, /holds no PEM certificate/, 'not refused as no PEM certificate');
  t.equal(result.code, 1, 'it failed only at the (absent) control plane');
  t.match(result.stderr, /^zenova-node: enrollment failed: /);
});
