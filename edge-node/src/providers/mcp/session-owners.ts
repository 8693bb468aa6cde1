/**
 * Which caller key each MCP session belongs to. The tool server sees only the node's own key, so it
 * cannot tell callers apart: the node binds a session to the key whose `initialize` answer carried
 * its `Mcp-Session-Id`, and refuses the id from any other key. A session no binding names (the id
 * was never seen, or its binding was evicted) is claimed by the first key the tool server answers
 * 2xx for with it, so ids a stateless server ignores or calls that fail leave no binding behind.
 *
 * The bindings live in a store (session-owner-store.ts): for a serving node, a SQLite file in its
 * state dir, so a restart keeps them and the node's replicas share them; without a state dir, this
 * process's memory. Admitting reads one binding; writing one after the tool server answered is
 * best-effort (a failure is logged): a binding not written leaves the session claimable, as it was
 * before the node knew it, and the caller that opened it is normally the first to use it.
 */
import { createHash } from 'node:crypto';
import type { Logger } from '../../logger.js';
import { MemorySessionOwnerStore } from './session-owner-store.js';
import type { SessionOwnerStore } from './session-owner-store.js';
import { SqliteSessionOwnerStore } from './sqlite-session-owner-store.js';

export class SessionOwners {
  constructor(
    private readonly store: SessionOwnerStore = new MemorySessionOwnerStore(),
    private readonly logger?: Logger,
  ) {}

  /** Whether `keyId` may use the session: it is unbound or bound to `keyId` (then it counts as used). */
  admit(server: string, sessionId: string, keyId: string): boolean {
    const id = sessionEntry(server, sessionId);
    const binding = this.store.get(id);
    if (binding === undefined) return true;
    if (binding.keyId !== keyId) return false;
    this.write('touch', () => this.store.touch(id, binding.lastUsedMs));
    return true;
  }

  /** Binds the session to `keyId`, replacing any owner (an `initialize` answer named it). */
  bind(server: string, sessionId: string, keyId: string): void {
    this.write('bind', () => this.store.bind(sessionEntry(server, sessionId), keyId));
  }

  /** Binds an unbound session to `keyId` (the tool server accepted it from that key). */
  claim(server: string, sessionId: string, keyId: string): void {
    const id = sessionEntry(server, sessionId);
    // Most calls use a bound session: a read, so only the first call of an unknown one writes.
    if (this.store.get(id) === undefined) this.write('claim', () => this.store.claim(id, keyId));
  }

  forget(server: string, sessionId: string): void {
    const id = sessionEntry(server, sessionId);
    if (this.store.get(id) !== undefined) this.write('forget', () => this.store.forget(id));
  }

  get size(): number {
    return this.store.size();
  }

  close(): void {
    this.store.close();
  }

  private write(what: string, fn: () => void): void {
    try {
      fn();
    } catch (err) {
      this.logger?.warn({ err, what }, 'an MCP session binding could not be written');
    }
  }
}

/** The store's key for a session: a 43-char hash, never the id (which the caller chooses, up to 1 KiB). */
export function sessionEntry(server: string, sessionId: string): string {
  return createHash('sha256').update(server).update('\n').update(sessionId).digest('base64url');
}

/** The serving node's table: in its state dir when it has one, else in memory. */
export function openSessionOwners(stateDir: string | undefined, logger: Logger): SessionOwners {
  const store = stateDir === undefined ? new MemorySessionOwnerStore() : new SqliteSessionOwnerStore({ stateDir });
  return new SessionOwners(store, logger);
}
