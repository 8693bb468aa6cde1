// Where `npm start` keeps its PostgreSQL cluster when the postgres user cannot reach the dev home:
// a cluster left there by an earlier checkout at the same path (whose password is gone with its
// dev state) is removed when the dev state is created anew, and kept while the state lives on.
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { choosePostgresDataDir } from '../../control-plane/src/dev-stack/postgres-data-dir.js';

function sandbox(t: { teardown(fn: () => void): void }): { home: string; outsideBase: string } {
  const root = mkdtempSync(join(os.tmpdir(), 'zn-dev-pgdir-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const home = join(root, 'checkout', '.zenova');
  mkdirSync(home, { recursive: true });
  return { home, outsideBase: join(root, 'var-lib-zenova-dev') };
}

t.test('a reachable home keeps the cluster inside it', async (t) => {
  const { home, outsideBase } = sandbox(t);
  t.same(choosePostgresDataDir(home, { freshState: true, homeReachable: true, outsideBase }), { dir: join(home, 'postgres'), removedLeftover: false });
  t.notOk(existsSync(outsideBase), 'nothing is made outside the home');
});

t.test("a fresh dev state removes a cluster an earlier checkout at the same path left outside the home", async (t) => {
  const { home, outsideBase } = sandbox(t);
  const first = choosePostgresDataDir(home, { freshState: true, homeReachable: false, outsideBase });
  t.equal(first.removedLeftover, false);
  t.ok(first.dir.startsWith(outsideBase));
  // The earlier checkout's cluster, with its own password.
  mkdirSync(first.dir, { recursive: true });
  writeFileSync(join(first.dir, 'PG_VERSION'), '15\n');

  const again = choosePostgresDataDir(home, { freshState: false, homeReachable: false, outsideBase });
  t.same(again, { dir: first.dir, removedLeftover: false }, 'while the dev state lives on, its cluster is kept');
  t.ok(existsSync(join(first.dir, 'PG_VERSION')));

  const fresh = choosePostgresDataDir(home, { freshState: true, homeReachable: false, outsideBase });
  t.same(fresh, { dir: first.dir, removedLeftover: true }, 'same path, new dev state: the same dir, emptied');
  t.notOk(existsSync(first.dir), 'the stale cluster is gone, so initdb makes one with the new password');
});

t.test('another checkout path gets its own dir', async (t) => {
  const { home, outsideBase } = sandbox(t);
  const a = choosePostgresDataDir(home, { freshState: true, homeReachable: false, outsideBase });
  const b = choosePostgresDataDir(`${home}-other`, { freshState: true, homeReachable: false, outsideBase });
  t.not(a.dir, b.dir);
});
