/**
 * Whether a host names this machine by a loopback name or address. Shared because the node (its
 * admin port, plain-HTTP listening), the control plane (the address it tells nodes to dial) and
 * the installer (control-plane URLs) must agree on what "only this host" means.
 */
import net from 'node:net';

/**
 * 127.0.0.0/8, ::1, an IPv4-mapped 127.x address however it is spelled (`::ffff:127.0.0.1`, or
 * `::ffff:7f00:1` as the URL parser writes it), with or without brackets, and `localhost` (also
 * fully qualified, `localhost.`).
 */
export function isLoopbackHost(host: string): boolean {
  const bare = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  if (/^localhost\.?$/i.test(bare)) return true;
  if (net.isIPv4(bare)) return bare.startsWith('127.');
  if (!net.isIPv6(bare)) return false;
  // The parser's one spelling of it: zeros compressed, lower case, a mapped IPv4 tail in hex.
  let canonical: string;
  try {
    canonical = new URL(`http://[${bare}]`).hostname.slice(1, -1);
  } catch {
    return false; // a zone (`fe80::1%eth0`): a link-local address, never loopback
  }
  if (canonical === '::1') return true;
  const mapped = /^::ffff:([0-9a-f]{1,4}):[0-9a-f]{1,4}$/.exec(canonical);
  return mapped !== null && parseInt(mapped[1]!, 16) >> 8 === 127;
}

/**
 * Whether a request's Host header names this host by a loopback name or address (127.0.0.0/8,
 * localhost, [::1]), with or without a port. A web page the operator opens can point its own name
 * at 127.0.0.1 (DNS rebinding) and reach a loopback port (the node's admin port, a key-less local
 * node), but its requests carry that name.
 */
export function isLoopbackHostHeader(header: string | undefined): boolean {
  if (header === undefined) return false;
  const value = header.trim();
  let host = value;
  let port: string | undefined;
  if (value.startsWith('[')) {
    const end = value.indexOf(']');
    if (end < 0) return false;
    host = value.slice(0, end + 1);
    const rest = value.slice(end + 1);
    if (rest !== '') {
      if (!rest.startsWith(':')) return false;
      port = rest.slice(1);
    }
  } else {
    const colon = value.lastIndexOf(':');
    if (colon >= 0) {
      // Only a bracketed IPv6 address may hold colons.
      if (value.indexOf(':') !== colon) return false;
      host = value.slice(0, colon);
      port = value.slice(colon + 1);
    }
  }
  if (port !== undefined && !/^[0-9]{1,5}$/.test(port)) return false;
  // A fully qualified name may end in a dot (`localhost.`).
  if (host.endsWith('.') && !host.startsWith('[')) host = host.slice(0, -1);
  return host !== '' && isLoopbackHost(host);
}
