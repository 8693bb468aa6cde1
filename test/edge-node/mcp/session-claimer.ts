// A node replica's MCP session table in its own process, for the claim race: opens the store on
// the state dir, prints "ready", and on SIGUSR2 claims session-0 … session-(COUNT-1) for KEY in
// that order, then prints {"owners":[…]} (the owner each claim returned) and exits.
// Usage: session-claimer.ts STATE_DIR KEY COUNT
import { SqliteSessionOwnerStore } from '../../../edge-node/src/providers/mcp/sqlite-session-owner-store.js';

const [stateDir, key, count] = process.argv.slice(2);
const n = Number(count);
const store = new SqliteSessionOwnerStore({ stateDir: stateDir ?? '' });
process.once('SIGUSR2', () => {
  const owners: string[] = new Array<string>(n);
  for (let i = 0; i < n; i++) owners[i] = store.claim(`session-${i}`, key ?? '');
  store.close();
  process.stdout.write(`${JSON.stringify({ owners })}\n`);
  process.exit(0);
});
process.stdout.write('ready\n');
// Kept alive until the signal.
setInterval(() => undefined, 60_000);
