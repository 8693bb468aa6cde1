// The admin API path of one node; the name is encoded, so no argument can reach another route.

export function nodePath(name: string, action?: string): string {
  const base = `api/v1/nodes/${encodeURIComponent(name)}`;
  return action === undefined ? base : `${base}/${action}`;
}
