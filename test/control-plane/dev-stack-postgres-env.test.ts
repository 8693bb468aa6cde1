// The dev stack's own PostgreSQL runs as another user, who can read its processes' environment in
// /proc: it gets none of the dev stack's settings, so a shell that sourced .zenova/dev.env (the
// admin token, the demo key, the database URL with its password) lends it none of them.
import { chmodSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { startLocalPostgres } from '../../control-plane/src/dev-stack/local-postgres.js';
import { freePort } from '../fixtures/free-port.js';

t.test("the dev stack's PostgreSQL server carries none of the shell's Zenova settings or database credentials", async (t) => {
  const secrets = {
    ZENOVA_ADMIN_TOKEN: 'zn_admin_dev-env-secret-0123456789',
    ZENOVA_API_KEY: 'zn_sk_dev-env-secret-abcdef',
    ZENOVA_DATABASE_URL: 'postgres://zenova:dev-env-db-password@127.0.0.1:1/zenova',
    PGPASSWORD: 'dev-env-pg-password',
  };
  const saved = Object.fromEntries(Object.keys(secrets).map((k) => [k, process.env[k]]));
  Object.assign(process.env, secrets);
  t.teardown(() => {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  });
  const dir = mkdtempSync(join(os.tmpdir(), 'zn-dev-pgenv-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  // The server's user (postgres, when the test runs as root) must reach the data dir.
  chmodSync(dir, 0o755);
  const pg = await startLocalPostgres({ dataDir: join(dir, 'pg'), port: await freePort(), superuser: 'zenova', password: 'cluster-password', log: () => undefined });
  t.teardown(() => pg.stop());
  t.ok(pg.pid, 'the server runs');
  const environ = readFileSync(`/proc/${pg.pid}/environ`, 'utf8').split('\0').filter(Boolean);
  const names = environ.map((entry) => entry.slice(0, entry.indexOf('=')));
  t.same(names.filter((n) => n.startsWith('ZENOVA_') || n.startsWith('PG')), [], 'no ZENOVA_* or libpq variable');
  for (const value of Object.values(secrets)) t.notOk(environ.some((entry) => entry.includes(value)), 'no secret value under any name');
  t.ok(environ.includes('LC_ALL=C'), 'the locale it is started with');
});
