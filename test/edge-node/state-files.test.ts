// The node's state files: atomic 0600 writes, a 0700 state dir, and the identity/credential files
// with their schemas and the rotation rule (the new credential current, the one in use previous).
import { readdir, readFile, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { writeFileAtomic } from '../../edge-node/src/state/atomic-write.js';
import {
  CREDENTIAL_FILE,
  isExpired,
  loadCredentials,
  saveCredentials,
  storeRotatedCredential,
} from '../../edge-node/src/state/credential-store.js';
import { IDENTITY_FILE, loadIdentity } from '../../edge-node/src/state/identity.js';
import { StateDirMissingError, StateFileError, openStateStore } from '../../edge-node/src/state/state-store.js';
import { startFakeGateway, newCredential, writeEnrolledState } from './control-fixtures.js';

const mode = async (file: string): Promise<number> => (await stat(file)).mode & 0o777;

t.test('an atomic write creates the file 0600 and replaces a looser file with 0600 and the new content', async (t) => {
  const dir = t.testdir({ 'loose.json': 'old' });
  const fresh = path.join(dir, 'fresh.json');
  await writeFileAtomic(fresh, 'first');
  t.equal(await readFile(fresh, 'utf8'), 'first');
  t.equal(await mode(fresh), 0o600);

  const loose = path.join(dir, 'loose.json');
  await (await import('node:fs/promises')).chmod(loose, 0o644);
  await writeFileAtomic(loose, 'new');
  t.equal(await readFile(loose, 'utf8'), 'new');
  t.equal(await mode(loose), 0o600, 'the replaced file is 0600, not the old 0644');
  t.same((await readdir(dir)).sort(), ['fresh.json', 'loose.json'], 'no temp file is left behind');
});

t.test('a reader racing atomic writes always sees one whole version, never a torn mix', async (t) => {
  const dir = t.testdir({});
  const file = path.join(dir, 'state.json');
  const size = 256 * 1024;
  const versions = ['a', 'b', 'c'].map((ch) => ch.repeat(size));
  await writeFileAtomic(file, versions[0]!);
  let writing = true;
  let reads = 0;
  const torn: string[] = [];
  const reader = (async () => {
    while (writing) {
      const text = await readFile(file, 'utf8');
      reads += 1;
      if (!versions.includes(text)) torn.push(`${text.length} bytes starting ${JSON.stringify(text.slice(0, 3))}`);
    }
  })();
  for (let i = 0; i < 60; i++) await writeFileAtomic(file, versions[i % versions.length]!);
  writing = false;
  await reader;
  t.ok(reads > 0, 'the reader ran');
  t.same(torn, [], 'every read saw a complete version');
});

t.test('the state store creates its directory 0700, reads absent files as undefined and names a corrupt file', async (t) => {
  const root = t.testdir({});
  const dir = path.join(root, 'deep', 'state');
  await t.rejects(openStateStore(dir, { create: false }), StateDirMissingError, 'status/doctor never create it');
  const store = await openStateStore(dir, { create: true });
  t.equal(await mode(dir), 0o700);
  t.equal(await store.read('absent.json'), undefined);
  await store.write('thing.json', { a: 1 });
  t.same(await store.read('thing.json'), { a: 1 });
  t.equal(await mode(path.join(dir, 'thing.json')), 0o600);
  await writeFile(path.join(dir, 'broken.json'), '{ nope');
  await t.rejects(store.read('broken.json'), { name: 'StateFileError', message: /broken\.json: is not valid JSON/ });
  await t.rejects(store.write('../escape.json', {}), /invalid state file name/, 'names cannot leave the directory');
});

t.test('a rotated credential becomes current and the one in use is kept as previous, durably', async (t) => {
  const store = await openStateStore(t.testdir({}), { create: true });
  const first = newCredential();
  await saveCredentials(store, { current: first });
  const second = newCredential();
  await storeRotatedCredential(store, second, first);
  t.same(await loadCredentials(store), { current: second, previous: first });
  // A reopened store (a restarted node) reads the same.
  t.same(await loadCredentials(await openStateStore(store.dir, { create: false })), { current: second, previous: first });
  t.equal(await mode(store.path(CREDENTIAL_FILE)), 0o600);

  const third = newCredential();
  await storeRotatedCredential(store, third, second);
  t.same(await loadCredentials(store), { current: third, previous: second }, 'only one previous is kept');
});

t.test('a malformed credential file is refused naming the field, without echoing the secret', async (t) => {
  const store = await openStateStore(t.testdir({}), { create: true });
  const secret = 'has spaces so it is not a metadata value';
  await store.write(CREDENTIAL_FILE, { current: { id: 'c1', secret, expiresAt: new Date().toISOString() } });
  const err = await loadCredentials(store).then(() => undefined, (e: unknown) => e as Error);
  t.type(err, StateFileError);
  t.match(err?.message, /current\.secret/);
  t.notMatch(err?.message, secret);
  t.ok(isExpired({ id: 'x', secret: 'y', expiresAt: new Date(Date.now() - 1).toISOString() }));
  t.notOk(isExpired(newCredential()));
});

t.test('identity.json round-trips and a tampered one is refused naming the field', async (t) => {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(t.testdir({}), gateway);
  t.same(await loadIdentity(state.store), state.identity);
  t.equal(await mode(state.store.path(IDENTITY_FILE)), 0o600);
  await state.store.write(IDENTITY_FILE, { ...state.identity, controlPlaneUrl: 'http://plain.example', gateway: { ...state.identity.gateway, caPem: 'junk' } });
  await t.rejects(loadIdentity(state.store), { message: /controlPlaneUrl: must be an https:\/\/ URL; gateway\.caPem: must be a PEM certificate/ });
});
