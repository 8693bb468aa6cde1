// Rows the billing tests need, inserted directly: accounts with an active key, nodes.
import { randomBytes } from 'node:crypto';
import type pg from 'pg';

export async function insertAccount(pool: pg.Pool, name = `acct-${randomBytes(4).toString('hex')}`): Promise<string> {
  const { rows } = await pool.query<{ id: string }>('insert into accounts (name) values ($1) returning id', [name]);
  const id = rows[0]!.id;
  await pool.query("insert into api_keys (account_id, name, key_hash, key_prefix) values ($1, 'k', $2, 'zk-test')", [id, randomBytes(32)]);
  return id;
}

export async function insertNode(pool: pg.Pool, name = `node-${randomBytes(4).toString('hex')}`): Promise<string> {
  const { rows } = await pool.query<{ id: string }>(
    "insert into nodes (name, surfaces, address, control_plane_url) values ($1, array['model'], '10.0.0.1', 'https://cp.example') returning id",
    [name],
  );
  return rows[0]!.id;
}

export async function storedBalance(pool: pg.Pool, accountId: string): Promise<{ balance: bigint; outstanding: bigint; spent: bigint }> {
  const { rows } = await pool.query<{ b: string; o: string; s: string }>(
    'select balance_micros::text as b, outstanding_micros::text as o, spent_micros::text as s from account_balances where account_id = $1',
    [accountId],
  );
  const r = rows[0]!;
  return { balance: BigInt(r.b), outstanding: BigInt(r.o), spent: BigInt(r.s) };
}
