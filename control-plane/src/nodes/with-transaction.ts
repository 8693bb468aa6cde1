/**
 * Runs `fn` in one transaction on a pooled client: commit when it resolves, roll back when it
 * throws. A client whose rollback failed is destroyed rather than returned to the pool in an
 * unknown state.
 */
import type pg from 'pg';

/** Anything that can run a query: the pool, or a client inside a transaction. */
export type Queryable = pg.Pool | pg.PoolClient;

export async function withTransaction<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let broken = false;
  try {
    await client.query('begin');
    const result = await fn(client);
    await client.query('commit');
    return result;
  } catch (err) {
    try {
      await client.query('rollback');
    } catch {
      broken = true;
    }
    throw err;
  } finally {
    client.release(broken);
  }
}
