/**
 * node-edge's listen address as the installer reads and writes it: `HOST:PORT`, an IPv6 host in
 * brackets (`[::]:7480`), the form `zenova-node serve --listen` reads (edge-node/src/cli/args.ts).
 * Every address the installer writes (etc/node.env, which the unit's ExecStart passes to --listen,
 * and `zenova status` and --reenroll read back) or prints goes through formatListen: a bare
 * `:::7480` is read by neither side.
 */

export interface ListenAddress {
  host: string;
  port: number;
}

/** `HOST:PORT` (IPv6 hosts bracketed) → parts (brackets removed), or undefined. */
export function parseListen(value: string): ListenAddress | undefined {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([A-Za-z0-9.-]+)):(\d{1,5})$/.exec(value.trim());
  const port = Number(m?.[3]);
  const host = m?.[1] ?? m?.[2];
  if (host === undefined || !Number.isInteger(port) || port < 1 || port > 65535) return undefined;
  return { host, port };
}

/** Parts → `HOST:PORT`, an IPv6 host (the only kind with a colon) in brackets; parseListen reads it back. */
export function formatListen(listen: ListenAddress): string {
  return listen.host.includes(':') ? `[${listen.host}]:${listen.port}` : `${listen.host}:${listen.port}`;
}
