/**
 * Which caller key each MCP session belongs to. The tool server sees only the node's own key, so it
 * cannot tell callers apart: the node binds a session to the key whose `initialize` answer carried
 * its `Mcp-Session-Id`, and admits the id only from that key. An id no binding names (never issued
 * through this node, its binding evicted or lost, or another spelling of a bound id) is refused to
 * every key: the client opens a new session on that 404 (the MCP specification requires it; with the
 * official TypeScript SDK the application does), whereas claiming unknown ids for the first key to
 * use them would let another key take a session whose binding was lost.
 *
 * The bindings live in a store (session-owner-store.ts): for a serving node, a SQLite file in its
 * state dir, so a restart keeps them and the node's replicas share them; without a state dir, or
 * when that file cannot be opened, this process's memory (still fail-closed: a replica refuses the
 * sessions it has not bound). A binding that cannot be written (the file locked past its short busy
 * timeout, a full disk), or an id another key already holds, is not handed out: the initialize is
 * refused (mcp-call.ts). A binding an initialize made whose answer then never went out (refused, its
 * caller gone) is dropped again (openedAnswerEnded): nobody was given the id. A binding that cannot be read admits nobody (a retryable 503). A touch not written only
 * ages it; after a failed touch the node writes no touch for a while, so a locked file does not stall
 * every call.
 */
import { createHash } from 'node:crypto';
import path from 'node:path';
import type { Logger } from '../../logger.js';
import { MemorySessionOwnerStore } from './session-owner-store.js';
import type { BindResult, SessionBinding, SessionOwnerStore } from './session-owner-store.js';
import { SESSION_OWNER_FILE, SqliteSessionOwnerStore } from './sqlite-session-owner-store.js';

/** How long touches stop after one failed (a locked file would otherwise stall each call by the busy timeout). */
const TOUCH_PAUSE_MS = 30_000;

export class SessionOwners {
  private touchesPausedUntil = 0;
  /**
   * Sessions an initialize of this process bound (bindOpened) whose answer has not ended yet: true
   * once something else bound or used the id meanwhile, so that binding stays whatever becomes of
   * the answer (the store's last use tells other processes' binds only from a later millisecond).
   */
  private readonly opening = new Map<string, boolean>();

  constructor(
    private readonly store: SessionOwnerStore = new MemorySessionOwnerStore(),
    private readonly logger?: Logger,
  ) {}

  /**
   * Whether `keyId` may use the session: 'admitted' only when it is bound to `keyId` (then it counts
   * as used); 'unreadable' when the binding could not be read (nobody is admitted: retry later).
   */
  admit(server: string, sessionId: string, keyId: string): 'admitted' | 'refused' | 'unreadable' {
    const id = sessionEntry(server, sessionId);
    let binding: SessionBinding | undefined;
    try {
      binding = this.store.get(id);
    } catch (err) {
      // An unreadable binding admits nobody (fail closed): the client opens a new session.
      this.logger?.warn({ err }, 'an MCP session binding could not be read; the call is refused (retryable)');
      return 'unreadable';
    }
    if (binding === undefined || binding.keyId !== keyId) return 'refused';
    if (this.opening.has(id)) this.opening.set(id, true);
    const now = Date.now();
    if (now >= this.touchesPausedUntil) {
      this.write('touch', () => this.store.touch(id, binding.lastUsedMs), () => (this.touchesPausedUntil = now + TOUCH_PAUSE_MS));
    }
    return 'admitted';
  }

  /**
   * Binds the session an `initialize` answer named to `keyId`: 'bound'; 'taken' when another key
   * holds that id (a tool server that gives every caller the same id, since it sees only the node's
   * key: the id is not handed to a second key); 'failed' when it could not be written (the id must
   * not be handed out either: the caller could not use it).
   */
  bind(server: string, sessionId: string, keyId: string): 'bound' | 'taken' | 'failed' {
    return this.bindOpened(server, sessionId, keyId).outcome;
  }

  /**
   * As bind; `madeAt` when this call made the binding (no key held the id): openedAnswerEnded must
   * then follow once the answer carrying the id went out or did not.
   */
  bindOpened(server: string, sessionId: string, keyId: string): { outcome: 'bound' | 'taken' | 'failed'; madeAt?: number } {
    const id = sessionEntry(server, sessionId);
    let bound: BindResult | undefined;
    this.write('bind', () => (bound = this.store.bind(id, keyId)));
    if (bound === undefined) return { outcome: 'failed' };
    if (bound.owner !== keyId) return { outcome: 'taken' };
    if (bound.madeAt === undefined) {
      if (this.opening.has(id)) this.opening.set(id, true);
      return { outcome: 'bound' };
    }
    this.opening.set(id, false);
    return { outcome: 'bound', madeAt: bound.madeAt };
  }

  /**
   * The answer carrying a session bindOpened made (at `madeAt`) has ended; `sent` whether it went
   * out. One that did not handed the id to nobody: its binding is dropped, unless something bound
   * or used the id since (a later initialize of the same key given the same id, by a tool server
   * that reuses ids, may have handed it out). True when it was dropped.
   */
  openedAnswerEnded(server: string, sessionId: string, keyId: string, madeAt: number, sent: boolean): boolean {
    const id = sessionEntry(server, sessionId);
    const usedMeanwhile = this.opening.get(id) === true;
    this.opening.delete(id);
    if (sent || usedMeanwhile) return false;
    let dropped = false;
    this.write('unbind', () => (dropped = this.store.forgetUnused(id, keyId, madeAt)));
    return dropped;
  }

  /**
   * True only when the store was read and binds the session to nobody: an id the node could not
   * bind may still be another caller's (a tool server giving every caller the same id, a replica
   * binding it at that moment), and such a session must not be ended for it.
   */
  unbound(server: string, sessionId: string): boolean {
    try {
      return this.store.get(sessionEntry(server, sessionId)) === undefined;
    } catch {
      return false;
    }
  }

  forget(server: string, sessionId: string): void {
    const id = sessionEntry(server, sessionId);
    // The tool server already answered: a failed read or write is logged, not the caller's failure.
    this.write('forget', () => {
      if (this.store.get(id) !== undefined) this.store.forget(id);
    });
  }

  get size(): number {
    return this.store.size();
  }

  close(): void {
    this.store.close();
  }

  private write(what: string, fn: () => void, onFailure?: () => void): void {
    try {
      fn();
    } catch (err) {
      onFailure?.();
      this.logger?.warn({ err, what }, 'an MCP session binding could not be written (a bind: the initialize is refused; a touch: touches pause; an unbind: the binding stays until evicted)');
    }
  }
}

/** The store's key for a session: a 43-char hash, never the id (which the caller chooses, up to 1 KiB). */
export function sessionEntry(server: string, sessionId: string): string {
  return createHash('sha256').update(server).update('\n').update(sessionId).digest('base64url');
}

/**
 * The serving node's table: in its state dir when it has one, else in memory. A file that cannot be
 * opened (not a database, unreadable) must not stop the node from serving its models: the table is
 * then kept in memory, which refuses what it has not bound, and the error names the file to move aside.
 */
export function openSessionOwners(stateDir: string | undefined, logger: Logger): SessionOwners {
  if (stateDir === undefined) return new SessionOwners(new MemorySessionOwnerStore(), logger);
  try {
    return new SessionOwners(new SqliteSessionOwnerStore({ stateDir }), logger);
  } catch (err) {
    const file = path.join(stateDir, SESSION_OWNER_FILE);
    logger.error(
      { err, file },
      `${file} could not be opened: MCP session bindings are kept in memory until it is repaired, so sessions opened before this start (or on other replicas) are refused and their clients open new ones; stop the node and move the file aside to start a new one`,
    );
    return new SessionOwners(new MemorySessionOwnerStore(), logger);
  }
}
