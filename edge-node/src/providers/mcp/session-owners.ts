/**
 * Which caller key each MCP session belongs to. The tool server sees only the node's own key, so it
 * cannot tell callers apart: the node binds a session to the key whose `initialize` answer carried
 * its `Mcp-Session-Id`, and refuses the id from any other key. One table per app (its deps),
 * bounded (the binding used least recently goes first). A session the table does not know (the node
 * restarted, or another replica opened it) is claimed by the first key the tool server answers 2xx
 * for with it, so ids a stateless server ignores or calls that fail leave no binding behind.
 */
import { createHash } from 'node:crypto';
import type { PipelineDeps } from '../../pipeline/deps.js';

/**
 * Bindings kept per node process. Each is a 43-char hash of (server, session id) — never the id,
 * which the caller chooses (up to 1 KiB) — to the config's key id string: about 150 bytes, so
 * about 8 MB when full.
 */
export const MAX_BOUND_SESSIONS = 50_000;

export class SessionOwners {
  private readonly owners = new Map<string, string>();

  constructor(private readonly max = MAX_BOUND_SESSIONS) {}

  /** Whether `keyId` may use the session: it is unbound or bound to `keyId` (then it counts as used). */
  admit(server: string, sessionId: string, keyId: string): boolean {
    const id = entry(server, sessionId);
    const owner = this.owners.get(id);
    if (owner === undefined) return true;
    if (owner !== keyId) return false;
    this.touch(id, keyId);
    return true;
  }

  /** Binds the session to `keyId`, replacing any owner (an `initialize` answer named it). */
  bind(server: string, sessionId: string, keyId: string): void {
    this.touch(entry(server, sessionId), keyId);
  }

  /** Binds an unbound session to `keyId` (the tool server accepted it from that key). */
  claim(server: string, sessionId: string, keyId: string): void {
    const id = entry(server, sessionId);
    if (!this.owners.has(id)) this.touch(id, keyId);
  }

  forget(server: string, sessionId: string): void {
    this.owners.delete(entry(server, sessionId));
  }

  get size(): number {
    return this.owners.size;
  }

  private touch(id: string, keyId: string): void {
    // Re-inserted, so the Map's order is the order of last use.
    this.owners.delete(id);
    this.owners.set(id, keyId);
    if (this.owners.size > this.max) {
      const oldest = this.owners.keys().next();
      if (oldest.done !== true) this.owners.delete(oldest.value);
    }
  }
}

function entry(server: string, sessionId: string): string {
  return createHash('sha256').update(server).update('\n').update(sessionId).digest('base64url');
}

const tables = new WeakMap<PipelineDeps, SessionOwners>();

/** The session table of the app whose pipeline `deps` these are. */
export function sessionOwners(deps: PipelineDeps): SessionOwners {
  let table = tables.get(deps);
  if (table === undefined) tables.set(deps, (table = new SessionOwners()));
  return table;
}
