// Child process of enroll-credential-lock.test.ts: stores a rotated credential in the state dir given
// as argv[2] the way a serving node's session does (storeRotatedCredentialIfUnchanged, under
// config-apply.lock), as whatever user it runs as, and prints one JSON line: the outcome, or the error.
import { randomUUID } from 'node:crypto';
import { loadCredentials, storeRotatedCredentialIfUnchanged } from '../../edge-node/src/state/credential-store.js';
import { openStateStore } from '../../edge-node/src/state/state-store.js';

try {
  const store = await openStateStore(process.argv[2] ?? '', { create: false });
  const file = await loadCredentials(store);
  if (file === undefined) throw new Error('no credential.json');
  const next = { id: randomUUID(), secret: `rotated.${randomUUID()}`, expiresAt: new Date(Date.now() + 86_400_000).toISOString() };
  const outcome = await storeRotatedCredentialIfUnchanged(store, next, file.current, file);
  process.stdout.write(`${JSON.stringify({ stored: outcome.stored, ...(outcome.stored ? { current: outcome.file.current.id, next: next.id } : { reason: outcome.reason }) })}\n`);
} catch (err) {
  process.stdout.write(`${JSON.stringify({ error: (err as Error).message })}\n`);
}
