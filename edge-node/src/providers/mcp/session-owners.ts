/**
 * Which caller key each MCP session belongs to. The tool server sees only the node's own key, so it
 * cannot tell callers apart: the node binds a session to the key whose `initialize` answer carried
 * its `Mcp-Session-Id`, and refuses the id from any other key. One table per app (its deps),
 * bounded (the oldest binding goes first). A session the table does not know (the node restarted,
 * or another replica opened it) is claimed by the first key that uses it.
 */
import type { PipelineDeps } from '../../pipeline/deps.js';

/** Bindings kept per node process; about 200 bytes each. */
export const MAX_BOUND_SESSIONS = 50_000;

export class SessionOwners {
  private readonly owners = new Map<string, string>();

  constructor(private readonly max = MAX_BOUND_SESSIONS) {}

  /** Whether `keyId` may use the session; an unknown session is bound to it. */
  admit(server: string, sessionId: string, keyId: string): boolean {
    const owner = this.owners.get(entry(server, sessionId));
    if (owner !== undefined) return owner === keyId;
    this.bind(server, sessionId, keyId);
    return true;
  }

  bind(server: string, sessionId: string, keyId: string): void {
    const id = entry(server, sessionId);
    // Re-inserted, so the Map's order is the order of last binding.
    this.owners.delete(id);
    this.owners.set(id, keyId);
    if (this.owners.size > this.max) {
      const oldest = this.owners.keys().next();
      if (oldest.done !== true) this.owners.delete(oldest.value);
    }
  }

  forget(server: string, sessionId: string): void {
    this.owners.delete(entry(server, sessionId));
  }

  get size(): number {
    return this.owners.size;
  }
}

function entry(server: string, sessionId: string): string {
  return `${server}\n${sessionId}`;
}

const tables = new WeakMap<PipelineDeps, SessionOwners>();

/** The session table of the app whose pipeline `deps` these are. */
export function sessionOwners(deps: PipelineDeps): SessionOwners {
  let table = tables.get(deps);
  if (table === undefined) tables.set(deps, (table = new SessionOwners()));
  return table;
}
