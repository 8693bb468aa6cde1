/**
 * The one proxy policy of the node's outbound links (enrollment, the installer's probe, doctor's
 * gateway probe and the gRPC control link): the standard variables as curl reads them.
 * - https_proxy, else HTTPS_PROXY (lowercase wins, as in curl): an http:// proxy (a bare
 *   `host:port` counts as http://), used with HTTP CONNECT; `user:pass@` in it becomes
 *   Proxy-Authorization and is never shown (the proxy is named by host:port only).
 * - no_proxy, else NO_PROXY: comma- or space-separated; `*` alone bypasses the proxy for every
 *   host; a name matches itself and its subdomains (a leading `.` is ignored); an IP matches
 *   itself; `a.b/NN` is a CIDR range for IP hosts; `host:port` matches that port only.
 * http_proxy / grpc_proxy are not read: every link here is TLS (curl, too, uses https_proxy for
 * https:// URLs).
 */
import net from 'node:net';

export interface ProxyServer {
  host: string;
  port: number;
  /** `user:pass` (decoded) from the URL, or undefined: sent as Proxy-Authorization Basic. Never log it. */
  credentials: string | undefined;
  /** Which variable named it: for messages. */
  source: string;
  /** `host:port` (`[v6]:port`): how messages name the proxy, without credentials. */
  label: string;
}

/** A proxy variable that cannot be used; the message never repeats its value (it may hold a password). */
export class ProxySettingError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ProxySettingError';
  }
}

type Env = Readonly<Record<string, string | undefined>>;

function firstSet(env: Env, names: readonly string[]): { name: string; value: string } | undefined {
  for (const name of names) {
    const value = env[name]?.trim();
    if (value !== undefined && value !== '') return { name, value };
  }
  return undefined;
}

function bare(host: string): string {
  return host.replace(/^\[|\]$/g, '').toLowerCase();
}

/**
 * A user or password from the proxy URL: its %XX escapes decoded, and a `%` that starts none kept
 * as it is, as curl does (a password like `50%off` is common and works there).
 */
function decodeUserInfo(text: string): string {
  return text.replace(/(?:%[0-9A-Fa-f]{2})+/g, (run) => {
    try {
      return decodeURIComponent(run);
    } catch {
      // Escapes that are not UTF-8 (`%ff`): kept as written.
      return run;
    }
  });
}

/** The proxy the variables name, or undefined when none is set. Throws ProxySettingError when unusable. */
export function configuredProxy(env: Env = process.env): ProxyServer | undefined {
  const setting = firstSet(env, ['https_proxy', 'HTTPS_PROXY']);
  if (setting === undefined) return undefined;
  let url: URL;
  try {
    url = new URL(/^[a-z][a-z0-9+.-]*:\/\//i.test(setting.value) ? setting.value : `http://${setting.value}`);
  } catch {
    throw new ProxySettingError(`${setting.name} is not a proxy URL (expected http://HOST:PORT)`);
  }
  if (url.protocol !== 'http:') {
    throw new ProxySettingError(`${setting.name} names a ${url.protocol}// proxy; only http:// proxies (HTTP CONNECT) are supported`);
  }
  if (url.hostname === '') throw new ProxySettingError(`${setting.name} names no proxy host`);
  const port = url.port === '' ? 80 : Number(url.port);
  const host = bare(url.hostname);
  const user = decodeUserInfo(url.username);
  const credentials = user === '' ? undefined : `${user}:${decodeUserInfo(url.password)}`;
  return { host, port, credentials, source: setting.name, label: `${net.isIPv6(host) ? `[${host}]` : host}:${port}` };
}

function entryMatches(entry: string, host: string, port: number): boolean {
  if (entry === '*') return true;
  if (entry.includes('/')) {
    const [range, bits] = entry.split('/');
    const family = net.isIPv4(range!) ? 'ipv4' : net.isIPv6(range!) ? 'ipv6' : undefined;
    const prefix = Number(bits);
    if (family === undefined || !Number.isInteger(prefix) || net.isIP(host) === 0) return false;
    const list = new net.BlockList();
    try {
      list.addSubnet(range!, prefix, family);
    } catch {
      return false;
    }
    return list.check(host, net.isIPv4(host) ? 'ipv4' : 'ipv6');
  }
  // host:port, [v6]:port, or a bare name / IP (a bare v6 has several colons).
  const withPort = /^(?:\[([^\]]+)\]|([^:]+)):(\d+)$/.exec(entry);
  let name = entry;
  if (withPort !== null) {
    if (Number(withPort[3]) !== port) return false;
    name = withPort[1] ?? withPort[2]!;
  }
  name = bare(name).replace(/^\./, '');
  if (name === '') return false;
  if (net.isIP(host) !== 0 || net.isIP(name) !== 0) return host === name;
  return host === name || host.endsWith(`.${name}`);
}

/** True when no_proxy / NO_PROXY says `host:port` is reached directly. */
export function bypassesProxy(host: string, port: number, env: Env = process.env): boolean {
  const setting = firstSet(env, ['no_proxy', 'NO_PROXY']);
  if (setting === undefined) return false;
  const target = bare(host).replace(/\.$/, '');
  return setting.value.split(/[\s,]+/).some((entry) => entry !== '' && entryMatches(entry.toLowerCase(), target, port));
}

/** The proxy to use for `host:port`, or undefined for a direct connection. Throws ProxySettingError. */
export function proxyFor(host: string, port: number, env: Env = process.env): ProxyServer | undefined {
  const proxy = configuredProxy(env);
  if (proxy === undefined || bypassesProxy(host, port, env)) return undefined;
  return proxy;
}
