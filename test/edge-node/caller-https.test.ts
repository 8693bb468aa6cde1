// The caller port over HTTPS (`zenova-node serve --tls-cert/--tls-key`): real `zenova-node`
// processes with certificates made in the test, the official openai client trusting the test CA,
// plain HTTP refused on that port, bad pairs refused naming the file, SIGHUP reloading a renewed
// pair for new connections while a bad one keeps the old, and doctor's check of the pair.
import { X509Certificate, webcrypto } from 'node:crypto';
import http from 'node:http';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import tls from 'node:tls';
import t from 'tap';
import type { Test } from 'tap';
import OpenAI from 'openai';
import { Agent, fetch as undiciFetch } from 'undici';
import { createCa, issueServerCert as issueWithValidity } from '../../control-plane/src/tls/self-signed.js';
// After self-signed.js, which loads reflect-metadata (x509 needs it) and sets its crypto provider.
import * as x509 from '@peculiar/x509';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { parseJsonLines, startProcess, tsEntry } from '../fixtures/processes.js';
import { createTestCa, issueServerCert } from '../fixtures/tls.js';
import type { IssuedCert, TestCa } from '../fixtures/tls.js';
import { waitFor } from '../fixtures/wait-for.js';
import { runNodeCli } from './cli-capture.js';
import { CALLER_KEY, testConfig } from './node-harness.js';

const MAIN = 'edge-node/src/main.ts';
const LISTENING = /"msg":"node-edge listening"/;

function runNode(t: Test, args: string[], readyLine?: RegExp, env?: NodeJS.ProcessEnv) {
  const entry = tsEntry(MAIN);
  return startProcess({ name: 'zenova-node', command: entry.command, args: [...entry.args, ...args], t, ...(readyLine ? { readyLine } : {}), ...(env ? { env } : {}) });
}

/** Writes a pair to cert.pem / key.pem in `dir` (over what is there) and returns the paths. */
function writePair(dir: string, pair: { certPem: string; keyPem: string }): { certFile: string; keyFile: string } {
  const certFile = path.join(dir, 'cert.pem');
  const keyFile = path.join(dir, 'key.pem');
  writeFileSync(certFile, pair.certPem);
  writeFileSync(keyFile, pair.keyPem, { mode: 0o600 });
  return { certFile, keyFile };
}

const serialOf = (certPem: string): string => new X509Certificate(certPem).serialNumber;

/** The serial of the certificate a new TLS connection to `port` is shown, verified against `ca` for 127.0.0.1. */
function servedSerial(port: number, ca: TestCa): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port, ca: ca.certPem }, () => {
      const serial = socket.getPeerCertificate().serialNumber;
      socket.end();
      resolve(serial);
    });
    socket.once('error', reject);
  });
}

/** One TLS connection kept open; `get` sends a keep-alive GET on it and resolves with the answer's head. */
async function openKeptConnection(port: number): Promise<{ socket: tls.TLSSocket; get(path: string): Promise<string> }> {
  const socket = await new Promise<tls.TLSSocket>((resolve, reject) => {
    const s = tls.connect({ host: '127.0.0.1', port, ca: ca.certPem }, () => resolve(s));
    s.once('error', reject);
  });
  let received = '';
  socket.on('data', (chunk: Buffer) => (received += chunk.toString('latin1')));
  return {
    socket,
    get: async (target) => {
      received = '';
      socket.write(`GET ${target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n`);
      await waitFor(() => (socket.destroyed ? Promise.reject(new Error('the connection was closed')) : /\r\n\r\n[\s\S]*\}/.test(received)), { what: `the answer to GET ${target}` });
      return received;
    },
  };
}

/** A node from a config file in `dir` beside the pair, serving HTTPS on 127.0.0.1. */
async function serveWithPair(t: Test, dir: string, files: { certFile: string; keyFile: string }) {
  const upstream = await startFakeUpstream(t);
  writeFileSync(path.join(dir, 'node.json'), JSON.stringify(testConfig(upstream.url)));
  const node = await runNode(t, ['serve', '--config', path.join(dir, 'node.json'), '--listen', '127.0.0.1:0', '--tls-cert', files.certFile, '--tls-key', files.keyFile], LISTENING);
  const url = String(parseJsonLines(node.output()).find((l) => l.msg === 'node-edge listening')?.url);
  return { node, url, port: Number(new URL(url).port) };
}

/** A certificate with a 512-bit RSA key: readable, matching, in date, and below what OpenSSL serves. */
async function rsa512Pair(): Promise<{ certPem: string; keyPem: string }> {
  const algorithm = { name: 'RSASSA-PKCS1-v1_5', modulusLength: 512, publicExponent: new Uint8Array([1, 0, 1]), hash: 'SHA-256' };
  const keys = await webcrypto.subtle.generateKey(algorithm, true, ['sign', 'verify']);
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    name: 'CN=127.0.0.1',
    keys,
    signingAlgorithm: algorithm,
    notBefore: new Date(Date.now() - 60_000),
    notAfter: new Date(Date.now() + 24 * 60 * 60_000),
    extensions: [new x509.SubjectAlternativeNameExtension([{ type: 'ip', value: '127.0.0.1' }])],
  });
  const keyPem = x509.PemConverter.encode(await webcrypto.subtle.exportKey('pkcs8', keys.privateKey), 'PRIVATE KEY');
  return { certPem: cert.toString('pem'), keyPem };
}

let ca: TestCa;
let first: IssuedCert;
t.before(async () => {
  ca = await createTestCa();
  first = await issueServerCert(ca, { ipAddresses: ['127.0.0.1'], dnsNames: ['localhost'] });
});

t.test('the official openai client calls a node serving HTTPS, trusting the test CA, and plain HTTP to that port gets no answer', async (t) => {
  const dir = t.testdir();
  const files = writePair(dir, first);
  const { node, url, port } = await serveWithPair(t, dir, files);
  t.match(url, /^https:\/\/127\.0\.0\.1:\d+$/, 'the listening line says https with the real port');
  t.notMatch(node.output(), /plain HTTP/, 'no plain-HTTP warning');
  t.match(node.output(), /expires on .* \(0 days left\)/, 'a certificate expiring within 14 days is served with a warning');

  const agent = new Agent({ connect: { ca: ca.certPem } });
  t.teardown(() => agent.close());
  const client = new OpenAI({
    baseURL: `${url}/v1`,
    apiKey: CALLER_KEY,
    maxRetries: 0,
    // The SDK passes its URL as a string; undici's fetch carries the dispatcher that trusts the test CA.
    fetch: (input, init) => undiciFetch(typeof input === 'string' || input instanceof URL ? input : input.url, { ...(init as object), dispatcher: agent }),
  });
  const { data, response } = await client.chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'over tls' }] }).withResponse();
  t.equal(data.choices[0]?.message.content, '[zenova demo upstream] echo: over tls');
  t.ok(response.headers.get('x-request-id'));

  const ready = await undiciFetch(`${url}/readyz`, { dispatcher: agent });
  t.equal(ready.status, 200, '/readyz answers over https');

  const untrusting = new Agent();
  t.teardown(() => untrusting.close());
  await t.rejects(undiciFetch(`${url}/readyz`, { dispatcher: untrusting }), 'a client without the CA refuses the certificate');

  const plain = await new Promise<string>((resolve) => {
    const req = http.get({ host: '127.0.0.1', port, path: '/readyz', timeout: 10_000 }, (res) => resolve(`answered ${res.statusCode}`));
    req.once('timeout', () => req.destroy(new Error('timeout')));
    req.once('error', (err: NodeJS.ErrnoException) => resolve(`failed: ${err.code ?? err.message}`));
  });
  t.match(plain, /^failed: /, `a plain-HTTP request to the TLS port fails (${plain})`);
  t.equal(await node.stop('SIGTERM'), 0);
});

t.test('SIGHUP serves a renewed pair to new connections without dropping open ones, and a bad new pair keeps the old', async (t) => {
  const dir = t.testdir();
  const files = writePair(dir, first);
  const { node, port } = await serveWithPair(t, dir, files);
  t.equal(await servedSerial(port, ca), serialOf(first.certPem));

  // A keep-alive connection opened before the reload, used again after it.
  const open = await openKeptConnection(port);
  t.teardown(() => open.socket.destroy());
  t.match(await open.get('/healthz'), /^HTTP\/1\.1 200/);

  const renewed = await issueServerCert(ca, { ipAddresses: ['127.0.0.1'] });
  writePair(dir, renewed);
  node.child.kill('SIGHUP');
  await waitFor(async () => (await servedSerial(port, ca)) === serialOf(renewed.certPem), { what: 'a new connection to see the renewed certificate' });
  t.match(node.output(), /node-edge reloaded its TLS certificate/);
  t.match(await open.get('/healthz'), /^HTTP\/1\.1 200/, 'the connection opened before the reload still answers');
  t.equal(open.socket.getPeerCertificate().serialNumber, serialOf(first.certPem), 'and still holds the first certificate');

  // A certificate whose key is not in the key file: refused, the renewed pair stays.
  const other = await issueServerCert(ca, { ipAddresses: ['127.0.0.1'] });
  writePair(dir, { certPem: other.certPem, keyPem: renewed.keyPem });
  node.child.kill('SIGHUP');
  await node.waitForLine(/node-edge kept its TLS certificate: the new pair was refused: the TLS key file .*key\.pem is not the private key of the certificate in .*cert\.pem/);
  t.equal(await servedSerial(port, ca), serialOf(renewed.certPem), 'new connections still see the renewed certificate');
  t.equal(node.child.exitCode, null, 'the node keeps running');
  t.equal(await node.stop('SIGTERM'), 0);
});

t.test('serve refuses a bad certificate pair before listening, with one line naming the file and exit 2', async (t) => {
  const dir = t.testdir({ 'node.json': JSON.stringify(testConfig('http://127.0.0.1:9/v1')), 'not-pem.txt': 'hello\n' });
  const good = writePair(dir, first);
  const config = path.join(dir, 'node.json');
  const otherKeyFile = path.join(dir, 'other-key.pem');
  writeFileSync(otherKeyFile, (await issueServerCert(ca, { ipAddresses: ['127.0.0.1'] })).keyPem);
  const expired = await issueWithValidity(ca, { ipAddresses: ['127.0.0.1'], validityDays: 1, issuedAt: new Date(Date.now() - 3 * 24 * 60 * 60_000) });
  const expiredCertFile = path.join(dir, 'expired-cert.pem');
  const expiredKeyFile = path.join(dir, 'expired-key.pem');
  writeFileSync(expiredCertFile, expired.certPem);
  writeFileSync(expiredKeyFile, expired.keyPem);
  const missing = path.join(dir, 'absent.pem');
  const notPem = path.join(dir, 'not-pem.txt');
  // A fullchain half copied: the leaf whole, the intermediate after it cut off mid-block.
  const cutChainFile = path.join(dir, 'cut-chain.pem');
  writeFileSync(cutChainFile, first.certPem + ca.certPem.slice(0, 200));
  const small = await rsa512Pair();
  const smallCertFile = path.join(dir, 'small-cert.pem');
  const smallKeyFile = path.join(dir, 'small-key.pem');
  writeFileSync(smallCertFile, small.certPem);
  writeFileSync(smallKeyFile, small.keyPem);
  const cases: Array<[string, string, string, RegExp]> = [
    ['a missing certificate file', missing, good.keyFile, new RegExp(`cannot read the TLS certificate file ${missing}: it does not exist`)],
    ['a missing key file', good.certFile, missing, new RegExp(`cannot read the TLS key file ${missing}: it does not exist`)],
    ['a certificate file without PEM', notPem, good.keyFile, new RegExp(`the TLS certificate file ${notPem} holds no PEM certificate`)],
    ['a key file without a PEM key', good.certFile, notPem, new RegExp(`the TLS key file ${notPem} holds no readable PEM private key`)],
    ['a key of another certificate', good.certFile, otherKeyFile, new RegExp(`the TLS key file ${otherKeyFile} is not the private key of the certificate in ${good.certFile}`)],
    ['an expired certificate', expiredCertFile, expiredKeyFile, new RegExp(`the TLS certificate in ${expiredCertFile} expired on \\d{4}-`)],
    ['a chain whose second block is cut', cutChainFile, good.keyFile, new RegExp(`the TLS certificate file ${cutChainFile} with the key ${good.keyFile} cannot be served: OpenSSL refuses them \\(bad end line\\)`)],
    ['a 512-bit RSA key', smallCertFile, smallKeyFile, new RegExp(`the TLS certificate file ${smallCertFile} with the key ${smallKeyFile} cannot be served: OpenSSL refuses them \\(ee key too small\\)`)],
  ];
  for (const [what, certFile, keyFile, message] of cases) {
    const run = await runNodeCli(['serve', '--config', config, '--listen', '127.0.0.1:0', '--tls-cert', certFile, '--tls-key', keyFile]);
    t.equal(run.code, 2, `${what}: exit 2`);
    t.match(run.stderr, message, `${what}: the message names the file`);
    t.equal(run.stderr.trim().split('\n').length, 1, `${what}: one line`);
  }
  for (const args of [['--tls-cert', good.certFile], ['--tls-key', good.keyFile]]) {
    const run = await runNodeCli(['serve', '--config', config, ...args]);
    t.equal(run.code, 2, `${args[0]} alone is a usage error`);
    t.match(run.stderr, /give both the certificate and its key, or neither/);
  }
});

t.test('serve takes the pair from ZENOVA_NODE_TLS_CERT_FILE and ZENOVA_NODE_TLS_KEY_FILE, and warns when it serves plain HTTP beyond loopback', async (t) => {
  const dir = t.testdir({ 'node.json': JSON.stringify(testConfig('http://127.0.0.1:9/v1')) });
  const files = writePair(dir, first);
  const config = path.join(dir, 'node.json');
  const viaEnv = await runNode(t, ['serve', '--config', config, '--listen', '127.0.0.1:0'], LISTENING, { ZENOVA_NODE_TLS_CERT_FILE: files.certFile, ZENOVA_NODE_TLS_KEY_FILE: files.keyFile });
  const url = String(parseJsonLines(viaEnv.output()).find((l) => l.msg === 'node-edge listening')?.url);
  t.match(url, /^https:\/\//);
  t.equal(await servedSerial(Number(new URL(url).port), ca), serialOf(first.certPem));
  t.equal(await viaEnv.stop('SIGTERM'), 0);

  const plain = await runNode(t, ['serve', '--config', config, '--listen', '0.0.0.0:0'], LISTENING);
  t.match(plain.output(), /serves plain HTTP on a non-loopback address: callers' API keys cross the network in clear/);
  t.equal(await plain.stop('SIGTERM'), 0);
});

t.test('doctor checks the caller TLS pair: a good one with its days left, a bad one with advice', async (t) => {
  const dir = t.testdir();
  const files = writePair(dir, first);
  const good = await runNodeCli(['doctor', '--state-dir', path.join(dir, 'absent-state'), '--tls-cert', files.certFile, '--tls-key', files.keyFile]);
  t.match(good.stdout, new RegExp(`(ok|FAIL)\\s+caller TLS certificate ${files.certFile}: key ${files.keyFile} matches, valid until \\S+ \\(0 days left\\)`));
  t.match(good.stdout, /expires on .* renew it, replace the files and reload/, 'a certificate with under 14 days left comes with renewal advice');

  // A pair with months left passes.
  const longCa = await createCa(`Zenova long-lived test CA ${Date.now()}`, { validityDays: 365 });
  mkdirSync(path.join(dir, 'long-lived'));
  const longLived = writePair(path.join(dir, 'long-lived'), await issueWithValidity(longCa, { ipAddresses: ['127.0.0.1'], validityDays: 90 }));
  const fine = await runNodeCli(['doctor', '--state-dir', path.join(dir, 'absent-state'), '--tls-cert', longLived.certFile, '--tls-key', longLived.keyFile]);
  t.match(fine.stdout, /ok\s+caller TLS certificate .*: key .* matches, valid until \S+ \((89|90) days left\)\n/);

  writeFileSync(files.keyFile, (await issueServerCert(ca, { ipAddresses: ['127.0.0.1'] })).keyPem);
  const bad = await runNodeCli(['doctor', '--state-dir', path.join(dir, 'absent-state'), '--tls-cert', files.certFile, '--tls-key', files.keyFile]);
  t.equal(bad.code, 1);
  t.match(bad.stdout, new RegExp(`FAIL\\s+caller TLS certificate ${files.certFile} and key ${files.keyFile}\\n\\s+the TLS key file ${files.keyFile} is not the private key of the certificate`));

  // A key OpenSSL will not serve fails here as it fails serve, not "ok" and then a restart loop.
  const small = writePair(path.join(dir, 'long-lived'), await rsa512Pair());
  const tooSmall = await runNodeCli(['doctor', '--state-dir', path.join(dir, 'absent-state'), '--tls-cert', small.certFile, '--tls-key', small.keyFile]);
  t.equal(tooSmall.code, 1);
  t.match(tooSmall.stdout, new RegExp(`FAIL\\s+caller TLS certificate ${small.certFile} and key ${small.keyFile}\\n\\s+the TLS certificate file ${small.certFile} with the key ${small.keyFile} cannot be served: OpenSSL refuses them \\(ee key too small\\)`));
});
