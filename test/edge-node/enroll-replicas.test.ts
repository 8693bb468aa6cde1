/**
 * The node's `replicas` in the enrollment answer, node side: enroll() returns the count the control
 * plane answered (the installer writes it to etc/node.env), 1 when the answer has none (an older
 * control plane), and refuses a count `serve --replicas` could not run, saving nothing.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { enroll } from '../../edge-node/src/enroll/enroll.js';
import { CONFIG_SIGNING_PUBLIC_KEY_PEM, startEnrollServer } from './enroll-fixtures.js';
import type { Answer } from './enroll-fixtures.js';

const TOKEN = 'zn_it_UmVwbGljYXNJblRoZUVucm9sbG1lbnRBbnN3ZXIwMTIzNDU2Nzg5';

async function enrollWith(t: Test, replicas: unknown): Promise<{ stateDir: string; result: Promise<Awaited<ReturnType<typeof enroll>>> }> {
  const srv = await startEnrollServer(t, {
    enroll: (): Answer => {
      const id = randomUUID();
      return {
        status: 200,
        body: {
          nodeId: randomUUID(),
          nodeName: 'edge-1',
          credential: { id, secret: `${id}.${randomBytes(32).toString('base64url')}`, expiresAt: new Date(Date.now() + 86_400_000).toISOString() },
          gateway: { target: '127.0.0.1:8443', serverName: 'localhost', caPem: '' },
          configSigningPublicKeyPem: CONFIG_SIGNING_PUBLIC_KEY_PEM,
          controlPlaneUrl: 'https://127.0.0.1',
          ...(replicas === undefined ? {} : { replicas }),
        },
      };
    },
  });
  const stateDir = path.join(mkdtempSync(path.join(tmpdir(), 'zn-enroll-replicas-')), 'state');
  t.teardown(() => rmSync(path.dirname(stateDir), { recursive: true, force: true }));
  return { stateDir, result: enroll({ controlPlaneUrl: srv.url, token: TOKEN, stateDir, caPem: srv.ca.certPem, reenroll: false }) };
}

t.test("enroll returns the answer's replica count", async (t) => {
  const { result } = await enrollWith(t, 3);
  t.equal((await result).replicas, 3);
});

t.test("an older control plane's answer without a count enrolls with 1", async (t) => {
  const { stateDir, result } = await enrollWith(t, undefined);
  t.equal((await result).replicas, 1);
  t.ok(existsSync(path.join(stateDir, 'identity.json')));
});

t.test('a count serve --replicas cannot run is refused and nothing is saved', async (t) => {
  for (const bad of [0, 1000, 2.5, '3']) {
    const { stateDir, result } = await enrollWith(t, bad);
    await t.rejects(result, { code: 'RESPONSE_INVALID', message: /replicas/ }, JSON.stringify(bad));
    t.notOk(existsSync(path.join(stateDir, 'identity.json')), 'no identity saved');
  }
});
