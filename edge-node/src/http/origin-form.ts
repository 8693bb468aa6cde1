// A request target as the node works with it: its origin form (path and query). RFC 9112 §3.2.2
// has a server accept the absolute form too (`POST http://host:port/v1/messages HTTP/1.1`, as
// clients write to a proxy); the node reduces it here, once, before routing (app.ts' rewriteUrl)
// and for the targets Node's parser fails on, so every path check, error message and log line
// sees `/v1/messages`, and the authority (with any `user:password@`) is never shown.

/** `scheme://authority` at the start of an absolute-form target (RFC 3986 scheme syntax). */
const SCHEME_AND_AUTHORITY = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/[^/?#]*/;

/** `target` without its scheme and authority (`/` when it has no path); other targets unchanged. */
export function originFormOf(target: string): string {
  const prefix = SCHEME_AND_AUTHORITY.exec(target);
  if (prefix === null) return target;
  const rest = target.slice(prefix[0].length);
  return rest.startsWith('/') ? rest : `/${rest}`;
}
