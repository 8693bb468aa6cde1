/**
 * Whether office-primary serves a config, as the banner reports it. A node restarted on a state dir
 * serves the config in its cache at once and logs `config applied` only when the control plane
 * pushes a newer one, so waiting for that line alone made every second `npm start` wait 30 s and
 * then say "no config yet" about a node that was already serving.
 */

export interface NodeConfigStatus {
  version: number;
  /** 'cache': served from the state dir at start; 'control plane': a push applied since. */
  from: 'cache' | 'control plane';
}

/** The config the `node-edge listening` line says the node serves, if it is ready. */
export function configAtStart(listening: Record<string, unknown>): NodeConfigStatus | undefined {
  const version = listening.configVersion;
  if (listening.ready !== true || typeof version !== 'number' || !Number.isSafeInteger(version)) return undefined;
  return { version, from: 'cache' };
}

/** The version a `config applied` line carries. */
export function configApplied(applied: Record<string, unknown> | undefined): NodeConfigStatus | undefined {
  const version = applied?.version;
  if (typeof version !== 'number' || !Number.isSafeInteger(version)) return undefined;
  return { version, from: 'control plane' };
}

/**
 * The node's config for the banner: a push already applied wins (it is the newer); otherwise the
 * config it started with; only a node that started without one is waited on, up to `timeoutMs`.
 */
export async function nodeConfigStatus(
  node: { ready: Record<string, unknown>; waitForMsg(msg: string, timeoutMs: number): Promise<Record<string, unknown> | undefined> },
  timeoutMs: number,
): Promise<NodeConfigStatus | undefined> {
  const atStart = configAtStart(node.ready);
  return configApplied(await node.waitForMsg('config applied', atStart ? 0 : timeoutMs)) ?? atStart;
}

/** The banner's words for it. */
export function describeNodeConfig(status: NodeConfigStatus | undefined): string {
  if (status === undefined) return 'no config yet';
  return status.from === 'cache' ? `config v${status.version} from its cache` : `config v${status.version} from the control plane`;
}
