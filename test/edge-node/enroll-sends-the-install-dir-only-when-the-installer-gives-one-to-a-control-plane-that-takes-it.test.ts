/**
 * The enrollment the installer runs names its install dir (`installDir`) to a control plane whose
 * preflight says it takes one (`installDirs: true`), so the control plane records where the node
 * really is; an older control plane, which refuses unknown body fields, is never sent it and
 * enrolls the node as before; `zenova-node enroll` by hand names none.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { enroll } from '../../edge-node/src/enroll/enroll.js';
import { runNodeCli as run } from './cli-capture.js';
import { CONFIG_SIGNING_PUBLIC_KEY_PEM, preflightAnswer, startEnrollServer, tokenErrorAnswer } from './enroll-fixtures.js';
import type { Answer, EnrollServer } from './enroll-fixtures.js';

const TOKEN = 'zn_it_SW5zdGFsbERpcklzU2VudE9ubHlXaGVuVGFrZW4wMTIzNDU2Nzg5';
const INSTALL_DIR = '/srv/qa/zenova-node';
/** The body fields a control plane before `installDirs` takes; it refuses any other. */
const OLDER_FIELDS = new Set(['token', 'mode', 'facts', 'redemptionKey', 'installedNodeId']);

const enrollBodies = (srv: EnrollServer): Array<Record<string, unknown>> =>
  srv.requests.filter((r) => r.method === 'POST' && r.path === '/api/enroll').map((r) => r.body as Record<string, unknown>);

async function caFile(dir: string, srv: EnrollServer): Promise<string> {
  const file = path.join(dir, 'ca.pem');
  await writeFile(file, srv.ca.certPem);
  return file;
}

t.test('the installer\'s enrollment sends its install dir to a control plane whose preflight takes it', async (t) => {
  const dir = t.testdir({});
  const srv = await startEnrollServer(t, { preflight: () => preflightAnswer({ installedNodeIds: true, installDirs: true }) });
  const result = await enroll({ controlPlaneUrl: srv.url, token: TOKEN, stateDir: path.join(dir, 'state'), caPem: srv.ca.certPem, reenroll: false, installDir: INSTALL_DIR });
  t.equal(result.nodeName, 'edge-1', 'enrolled');
  t.equal(enrollBodies(srv)[0]?.installDir, INSTALL_DIR, 'the install dir is sent');
});

t.test('an older control plane, whose preflight does not say it takes installDir, is not sent it and enrolls the node', async (t) => {
  const dir = t.testdir({});
  // As an older control plane: a body field it does not know is refused (ZN_ERR_CP_INVALID_REQUEST).
  const olderEnroll = (body: unknown, srv: EnrollServer): Answer => {
    const unknown = Object.keys(body as Record<string, unknown>).filter((k) => !OLDER_FIELDS.has(k));
    if (unknown.length > 0) return tokenErrorAnswer(400, 'ZN_ERR_CP_INVALID_REQUEST', unknown.map((k) => `body field '${k}': unknown field`).join('; '));
    const id = randomUUID();
    return {
      status: 200,
      body: {
        nodeId: randomUUID(),
        nodeName: 'edge-1',
        credential: { id, secret: `${id}.${randomBytes(32).toString('base64url')}`, expiresAt: new Date(Date.now() + 86_400_000).toISOString() },
        gateway: { target: '127.0.0.1:8443', serverName: 'localhost', caPem: srv.gatewayCa.certPem },
        configSigningPublicKeyPem: CONFIG_SIGNING_PUBLIC_KEY_PEM,
        controlPlaneUrl: srv.url,
      },
    };
  };
  // Answered only after the server started, so `srv` is set by then.
  const srv: EnrollServer = await startEnrollServer(t, { preflight: () => preflightAnswer({ installedNodeIds: true }), enroll: (body) => olderEnroll(body, srv) });
  const result = await enroll({ controlPlaneUrl: srv.url, token: TOKEN, stateDir: path.join(dir, 'state'), caPem: srv.ca.certPem, reenroll: false, installDir: INSTALL_DIR });
  t.equal(result.nodeName, 'edge-1', 'the request is accepted: the node is enrolled');
  const [body] = enrollBodies(srv);
  t.notOk('installDir' in body!, 'no installDir sent');
});

t.test('`zenova-node enroll` by hand names no install dir, even to a control plane that takes one', async (t) => {
  const dir = t.testdir({});
  const srv = await startEnrollServer(t, { preflight: () => preflightAnswer({ installedNodeIds: true, installDirs: true }) });
  const r = await run(['enroll', '--control-plane', srv.url, '--token', TOKEN, '--state-dir', path.join(dir, 'state'), '--ca-file', await caFile(dir, srv)]);
  t.equal(r.code, 0, r.stderr);
  t.notOk('installDir' in enrollBodies(srv)[0]!, 'no installDir sent');
});
