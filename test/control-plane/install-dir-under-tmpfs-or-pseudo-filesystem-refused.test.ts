/**
 * A node's installDir under a tmpfs or kernel pseudo filesystem (/run, /var/run, /dev — /dev/shm
 * included —, /proc, /sys) is refused at POST /api/v1/nodes like /tmp and /run/user, saying why, and
 * nothing is stored; a dir whose name only starts like one of them (/runner, /devices) is fine.
 */
import t from 'tap';
import { testDatabase } from '../fixtures/postgres.js';
import { bearer, migratedPool, nodesApp, validNodeBody } from './nodes-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const { app } = await nodesApp(t, db.url);

const REFUSED: Array<[dir: string, message: string]> = [
  ['/run/zenova-node', 'installDir: must not be under /run (a tmpfs, wiped on reboot)'],
  ['/run/zenova-node/', 'installDir: must not be under /run (a tmpfs, wiped on reboot)'],
  ['/var/run/x', 'installDir: must not be under /var/run (a link to /run, a tmpfs wiped on reboot)'],
  ['/dev/shm/x', 'installDir: must not be under /dev (device files and /dev/shm, a tmpfs: not a real disk)'],
  ['/proc/x', 'installDir: must not be under /proc (a kernel pseudo filesystem, not a real disk)'],
  ['/sys/x', 'installDir: must not be under /sys (a kernel pseudo filesystem, not a real disk)'],
  // The narrower root is still the one named.
  ['/run/user/1000/zenova', 'installDir: must not be under /run/user'],
];

t.test('an installDir under /run, /var/run, /dev, /proc or /sys is a 400 naming the root and why, and no node is stored', async (t) => {
  for (const [dir, message] of REFUSED) {
    const body = validNodeBody({ installDir: dir });
    const res = await app.inject({ method: 'POST', url: '/api/v1/nodes', headers: bearer, payload: body });
    t.equal(res.statusCode, 400, `${dir}: 400`);
    const error = res.json<{ error?: { code: string; message: string } }>().error;
    t.equal(error?.code, 'ZN_ERR_CP_INVALID_REQUEST', `${dir}: code`);
    t.equal(error?.message, message, `${dir}: message`);
    const { rowCount } = await pool.query('select 1 from nodes where name = $1', [body.name]);
    t.equal(rowCount, 0, `${dir}: nothing stored`);
  }
});

t.test('a dir whose first segment only begins like a refused root is accepted', async (t) => {
  for (const dir of ['/runner/zenova-node', '/devices/zenova-node', '/system/zenova-node', '/srv/run/zenova-node']) {
    const res = await app.inject({ method: 'POST', url: '/api/v1/nodes', headers: bearer, payload: validNodeBody({ installDir: dir }) });
    t.equal(res.statusCode, 201, `${dir}: ${res.statusCode === 201 ? 'accepted' : res.body}`);
  }
});
