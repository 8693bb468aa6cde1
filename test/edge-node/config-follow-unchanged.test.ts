// A replica that does not hold the control link follows config/current.json every link-lock tick
// (2 s: serve.ts). It used to read, verify, parse and rebuild the whole bundle on every tick even
// when the file was the one it already served: with a bundle near the 8 MiB limit that held its
// event loop for about half a second every 2 s. An unchanged file (inode, size, mtime, under the
// same trust) is now not read again; a file the holder replaced is still taken at the next tick, also
// after a read of it failed for a passing reason. A damaged current.json (refused for its content)
// was read and verified again on every tick too; it is now read once, until it changes.
import type * as NodeCrypto from 'node:crypto';
import type * as NodeFsPromises from 'node:fs/promises';
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { createRequire, syncBuiltinESMExports } from 'node:module';
import path from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { loadEnrolledConfig } from '../../edge-node/src/config/enrolled-config.js';
import { createLogger } from '../../edge-node/src/logger.js';
import { signedConfigNode } from './signed-config-node.js';

const require = createRequire(import.meta.url);
const crypto = require('node:crypto') as typeof NodeCrypto;
const fsp = require('node:fs/promises') as typeof NodeFsPromises;

/** Counts node:crypto.verify calls (the bundle signature check) until the test ends. */
function countVerifies(t: { teardown(fn: () => unknown): void }): () => number {
  const original = crypto.verify;
  let count = 0;
  (crypto as { verify: unknown }).verify = (...args: unknown[]) => {
    count += 1;
    return (original as (...a: unknown[]) => unknown)(...args);
  };
  // The ESM named export is a live binding kept in step with the CommonJS object by this call.
  syncBuiltinESMExports();
  t.teardown(() => {
    (crypto as { verify: unknown }).verify = original;
    syncBuiltinESMExports();
  });
  return () => count;
}

/** A state dir where the link holder applied version 5, and a follower replica started on it. */
async function holderAndFollower(t: Test) {
  const stateDir = t.testdir({});
  const { identity, push } = signedConfigNode();
  const logger = createLogger({ level: 'silent' });
  const holder = await loadEnrolledConfig(stateDir, identity, logger);
  const applied = await holder.applier.apply(push(5));
  // A replica starting now serves that current.json.
  const follower = await loadEnrolledConfig(stateDir, identity, logger);
  return { holder, follower, push, applied, stateDir };
}

t.test('a follower does not verify the current.json it already serves again on every tick, and still takes the one the holder writes next', async (t) => {
  const { holder, follower, push, applied } = await holderAndFollower(t);
  t.match(applied, { ok: true, version: 5 });
  t.equal(follower.holder.appliedVersion(), 5);

  const verifies = countVerifies(t);
  for (let tick = 0; tick < 3; tick++) t.equal(await follower.applier.followCache(), undefined, `tick ${tick + 1}: nothing new`);
  t.equal(verifies(), 0, 'the file it read at start is not verified again');

  t.match(await holder.applier.apply(push(6)), { ok: true, version: 6 });
  t.match(await follower.applier.followCache(), { ok: true, version: 6, changed: true }, 'the next file is taken');
  t.equal(follower.holder.appliedVersion(), 6);
  const afterTaking = verifies();
  t.ok(afterTaking >= 1, 'that one was verified');
  t.equal(await follower.applier.followCache(), undefined);
  t.equal(verifies(), afterTaking, 'and not again on the ticks after');
});

t.test('a follower whose read of a new current.json failed for a passing reason (EMFILE) takes it on the next tick', async (t) => {
  const { holder, follower, push } = await holderAndFollower(t);
  t.match(await holder.applier.apply(push(6)), { ok: true, version: 6 });

  const original = fsp.readFile;
  let failed = 0;
  (fsp as { readFile: unknown }).readFile = (async (file: unknown, ...rest: unknown[]) => {
    if (failed === 0 && String(file).endsWith('current.json')) {
      failed++;
      throw Object.assign(new Error('EMFILE: too many open files'), { code: 'EMFILE' });
    }
    return (original as (...a: unknown[]) => unknown)(file, ...rest);
  });
  syncBuiltinESMExports();
  t.teardown(() => {
    (fsp as { readFile: unknown }).readFile = original;
    syncBuiltinESMExports();
  });
  t.equal(await follower.applier.followCache(), undefined, 'the tick whose read failed takes nothing');
  t.equal(failed, 1);
  t.match(await follower.applier.followCache(), { ok: true, version: 6, changed: true }, 'the next tick reads it again and takes it');
});

/** Counts node:fs/promises.readFile calls of config/current.json until the test ends. */
function countCurrentReads(t: { teardown(fn: () => unknown): void }): () => number {
  const original = fsp.readFile;
  let count = 0;
  (fsp as { readFile: unknown }).readFile = (async (file: unknown, ...rest: unknown[]) => {
    if (String(file).endsWith(`${path.sep}current.json`)) count += 1;
    return (original as (...a: unknown[]) => unknown)(file, ...rest);
  });
  syncBuiltinESMExports();
  t.teardown(() => {
    (fsp as { readFile: unknown }).readFile = original;
    syncBuiltinESMExports();
  });
  return () => count;
}

/** Replaces config/current.json as a store does (a new file renamed over it). */
function replaceCurrent(stateDir: string, text: string): void {
  const file = path.join(stateDir, 'config', 'current.json');
  writeFileSync(`${file}.test-new`, text, { mode: 0o600 });
  renameSync(`${file}.test-new`, file);
}

const damagedCurrent: { damage: string; text: (current: string) => string }[] = [
  {
    damage: 'a bad signature',
    text: (current) => {
      const entry = JSON.parse(current) as { signature: string };
      const signature = Buffer.from(entry.signature, 'base64');
      signature[0] = signature[0]! ^ 0xff;
      return JSON.stringify({ ...entry, signature: signature.toString('base64') });
    },
  },
  { damage: 'text that is not JSON', text: (current) => current.slice(0, Math.floor(current.length / 2)) },
];

for (const { damage, text } of damagedCurrent) {
  t.test(`a follower reads a current.json with ${damage} once, not on every tick, and takes the fixed file written later`, async (t) => {
    const { holder, follower, push, stateDir } = await holderAndFollower(t);
    const current = readFileSync(path.join(stateDir, 'config', 'current.json'), 'utf8');
    replaceCurrent(stateDir, text(current));

    const reads = countCurrentReads(t);
    const verifies = countVerifies(t);
    for (let tick = 0; tick < 4; tick++) t.equal(await follower.applier.followCache(), undefined, `tick ${tick + 1}: nothing taken`);
    t.equal(reads(), 1, 'the damaged file is read on the first tick only');
    t.ok(verifies() <= 1, 'and verified at most once');
    t.equal(follower.holder.appliedVersion(), 5, 'the follower keeps serving what it served');

    t.match(await holder.applier.apply(push(6)), { ok: true, version: 6 });
    t.match(await follower.applier.followCache(), { ok: true, version: 6, changed: true }, 'the fixed file is taken at the next tick');
    t.equal(reads(), 2);
  });
}
