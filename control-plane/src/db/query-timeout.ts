/**
 * The client-side bound on a query (pg's `query_timeout`): the only thing that ends a query on a
 * connection that went silent (a hung server, a failover, a NAT or firewall drop) — the server's
 * statement_timeout needs a server that answers, and TCP keepalive a peer that stops answering probes.
 *
 * pg rejects a timed-out query with "Query read timeout" but leaves it active on its connection,
 * so anything queued behind it (the caller's rollback, the next checkout of a client released
 * without an error) would wait on a reply that never comes. `endOnQueryTimeout` cuts the connection
 * at the timeout instead: later queries on the client fail at once, and the pool drops it.
 */
import type pg from 'pg';

const QUERY_TIMEOUT_MESSAGE = 'Query read timeout';

export function isQueryTimeout(err: unknown): err is Error {
  return err instanceof Error && err.message === QUERY_TIMEOUT_MESSAGE;
}

type QueryFunction = (...args: unknown[]) => unknown;
type QueryCallback = (err: unknown, result: unknown) => void;

/** Ends `client` (its socket destroyed: the timed-out query is still active) when one of its queries times out. */
export function endOnQueryTimeout(client: pg.Client, onTimeout?: (err: Error) => void): void {
  const query = client.query.bind(client) as QueryFunction;
  const settle = (err: unknown): void => {
    if (!isQueryTimeout(err)) return;
    onTimeout?.(err);
    // pg's end() destroys the socket when a query is active, rather than waiting on a goodbye.
    client.end().catch(() => undefined);
  };
  const bounded: QueryFunction = (...args) => {
    const last = args.length - 1;
    const callback = args[last];
    // pool.query and other callback callers: see the error before the caller releases the client.
    if (typeof callback === 'function') {
      args[last] = (err: unknown, result: unknown): void => {
        settle(err);
        (callback as QueryCallback)(err, result);
      };
      return query(...args);
    }
    const result = query(...args);
    // Observed only: the caller's own await still gets the rejection.
    if (result instanceof Promise) result.catch(settle);
    return result;
  };
  (client as unknown as { query: QueryFunction }).query = bounded;
}
