/**
 * Requests Node's HTTP parser refuses (a malformed header line, headers over 16 KiB, a bad chunk)
 * never reach the routes. They are answered in the documented body with a code and x-request-id,
 * over plain HTTP and over the console's own HTTPS server alike, and even at log level trace no
 * line holds the request's raw bytes (the admin token, an install token), as fastify's default
 * handler logged them.
 */
import { connect } from 'node:net';
import type { AddressInfo, Socket } from 'node:net';
import { connect as connectTls } from 'node:tls';
import t from 'tap';
import { buildApp } from '../../control-plane/src/app.js';
import { createPool } from '../../control-plane/src/db/pool.js';
import { listenConsole } from '../../control-plane/src/tls/console-server.js';
import { testDatabase } from '../fixtures/postgres.js';
import { runEach } from '../fixtures/teardown-steps.js';
import { createTestCa, issueServerCert } from '../fixtures/tls.js';
import { ADMIN_TOKEN, captureLogger, testSettings } from './helpers.js';
import { migratedPool, stubEnrollment } from './nodes-harness.js';

const db = await testDatabase(t);
await migratedPool(t, db.url);
const settings = { ...testSettings(db.url), logLevel: 'trace' as const };
const log = captureLogger(settings);
const pool = createPool({ databaseUrl: db.url, logger: log.logger });
const app = await buildApp({ settings, pool, logger: log.logger, enrollment: stubEnrollment });
await app.listen({ host: '127.0.0.1', port: 0 });
t.teardown(() => runEach('the app', () => app.close(), () => pool.end()));
const port = (app.server.address() as AddressInfo).port;

// The same app behind the HTTPS server listenConsole builds itself (ZENOVA_TLS_CERT_FILE set).
const tlsApp = await buildApp({ settings, pool, logger: log.logger, enrollment: stubEnrollment });
const ca = await createTestCa();
const cert = await issueServerCert(ca, { ipAddresses: ['127.0.0.1'] });
const tlsListener = await listenConsole(tlsApp, { host: '127.0.0.1', port: 0 }, cert);
t.teardown(() => tlsListener.close());
const tlsPort = Number(new URL(tlsListener.url).port);

const INSTALL_TOKEN = `zit_${'s'.repeat(40)}`;

type Transport = 'http' | 'https';

/** Sends raw bytes, reads until the server closes the connection. */
function exchange(raw: string, transport: Transport = 'http'): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket: Socket = transport === 'http'
      ? connect(port, '127.0.0.1')
      : connectTls({ port: tlsPort, host: '127.0.0.1', ca: ca.certPem });
    const chunks: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', reject);
    socket.on('close', () => resolve(Buffer.concat(chunks).toString('latin1')));
    socket.write(raw);
  });
}

function parse(answer: string): { status: number; headers: Map<string, string>; body: { error: { code: string; message: string; type: string } } } {
  const [head = '', body = ''] = answer.split('\r\n\r\n');
  const [statusLine = '', ...lines] = head.split('\r\n');
  const headers = new Map(lines.map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]));
  return { status: Number(statusLine.split(' ')[1]), headers, body: JSON.parse(body) };
}

const auth = `Authorization: Bearer ${ADMIN_TOKEN}\r\n`;
const cases: Array<{ name: string; raw: string; status: number; code: string }> = [
  { name: 'a malformed header line', raw: `GET /api/v1/nodes HTTP/1.1\r\nHost: cp\r\n${auth}Bad Header: x\r\n\r\n`, status: 400, code: 'ZN_ERR_CP_INVALID_REQUEST' },
  { name: 'headers over 16 KiB', raw: `GET /api/v1/nodes HTTP/1.1\r\nHost: cp\r\n${auth}Cookie: ${'c'.repeat(20_000)}\r\n\r\n`, status: 431, code: 'ZN_ERR_CP_HEADERS_TOO_LARGE' },
  {
    name: 'a bad chunk size in an enrollment',
    raw: `POST /api/enroll HTTP/1.1\r\nHost: cp\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n${(`{"token":"${INSTALL_TOKEN}"}`.length).toString(16)}\r\n{"token":"${INSTALL_TOKEN}"}\r\nZZ\r\n`,
    status: 400,
    code: 'ZN_ERR_CP_INVALID_REQUEST',
  },
];

for (const c of cases) for (const transport of ['http', 'https'] as const) {
  t.test(`${c.name} over ${transport} is answered ${c.status} ${c.code} with x-request-id, and no log line holds its bytes`, async (t) => {
    const answer = parse(await exchange(c.raw, transport));
    t.equal(answer.status, c.status);
    t.equal(answer.body.error.code, c.code);
    t.equal(answer.body.error.type, 'invalid_request_error');
    t.match(answer.headers.get('x-request-id'), /^[0-9a-f-]{36}$/);
    t.equal(answer.headers.get('connection'), 'close');
    t.equal(answer.headers.get('cache-control'), 'no-store', 'like every answer of the API');
    const logged = log.text();
    t.match(logged, /request refused by the HTTP parser/);
    t.notOk(logged.includes('rawPacket'), 'no raw packet in the log');
    t.notOk(logged.includes(ADMIN_TOKEN), 'no admin token in the log');
    t.notOk(logged.includes(INSTALL_TOKEN), 'no install token in the log');
    t.notOk(answer.body.error.message.includes(ADMIN_TOKEN));
  });
}

t.test('a malformed request pipelined behind a good one is answered after that one\'s whole answer', async (t) => {
  const good = `GET /api/v1/nodes HTTP/1.1\r\nHost: cp\r\n${auth}\r\n`;
  const bad = `GET /api/v1/nodes HTTP/1.1\r\nHost: cp\r\nBad Header: x\r\n\r\n`;
  const answer = await exchange(good + bad);
  const statuses = [...answer.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]));
  t.same(statuses, [200, 400], 'both answered, in order');
  const second = answer.slice(answer.lastIndexOf('HTTP/1.1 '));
  t.equal(parse(second).body.error.code, 'ZN_ERR_CP_INVALID_REQUEST');
  const first = answer.slice(0, answer.lastIndexOf('HTTP/1.1 '));
  const length = Number(/content-length: (\d+)/i.exec(first)?.[1]);
  t.equal(Buffer.byteLength(first.split('\r\n\r\n')[1] ?? '', 'latin1'), length, 'the first answer is whole');
});

t.test("a pipelined request whose body has a bad chunk is answered 400 at once, after the answer before it", async (t) => {
  const good = `GET /api/v1/nodes HTTP/1.1\r\nHost: cp\r\n${auth}\r\n`;
  const bad = `POST /api/enroll HTTP/1.1\r\nHost: cp\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\nZZ\r\n`;
  const started = Date.now();
  const answer = await exchange(good + bad);
  const statuses = [...answer.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]));
  t.same(statuses, [200, 400], 'both answered, in order');
  t.equal(parse(answer.slice(answer.lastIndexOf('HTTP/1.1 '))).body.error.code, 'ZN_ERR_CP_INVALID_REQUEST');
  t.ok(Date.now() - started < 30_000, 'not after the request timeout');
});

t.test('bytes behind a refused request are refused once, not once per packet', async (t) => {
  const before = log.text().split('request refused by the HTTP parser').length;
  const good = `GET /api/v1/nodes HTTP/1.1\r\nHost: cp\r\n${auth}\r\n`;
  const bad = `GET /api/v1/nodes HTTP/1.1\r\nHost: cp\r\nBad Header: x\r\n\r\n`;
  await exchange(good + bad + 'x'.repeat(200 * 1024));
  t.equal(log.text().split('request refused by the HTTP parser').length - before, 1);
});
