/**
 * Whether a host names this machine by a loopback name or address. Shared because the node (its
 * admin port, plain-HTTP listening), the control plane (the address it tells nodes to dial) and
 * the installer (control-plane URLs) must agree on what "only this host" means.
 */
import net from 'node:net';

/** 127.0.0.0/8, ::1 (also IPv4-mapped, with or without brackets) and `localhost`. */
export function isLoopbackHost(host: string): boolean {
  const bare = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  if (bare.toLowerCase() === 'localhost') return true;
  const v4 = bare.toLowerCase().startsWith('::ffff:') ? bare.slice(7) : bare;
  if (net.isIPv4(v4)) return v4.startsWith('127.');
  if (net.isIPv6(bare)) return /^(0{0,4}:){7}0{0,3}1$|^::1$/.test(bare.toLowerCase());
  return false;
}
