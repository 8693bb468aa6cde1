// GET /readyz on the caller port: whether the node can serve (it has a verified config), which
// config version it serves since when, and whether its control link is up (or since when not).
// A node serving from its cache with the control plane gone is ready: that is the point of the cache.
// So is one still serving the previous installation's config after a re-enrollment, with a warning.
// One whose spool refuses every new request (writes failing, or full under policy `reject`) is not
// ready: a load balancer then sends callers to a node that can answer them. A full spool under
// `metering-only` still serves (without bodies): ready, with a warning. A node the control plane
// deleted refuses every caller (ZN_ERR_NODE_DELETED) until it is re-enrolled: not ready either.
import type { FastifyInstance } from 'fastify';
import type { ConfigHolder } from '../config/config-holder.js';
import { olderConfigWarning, previousEnrollmentWarning } from '../config/enrolled-config.js';
import { spoolProblem } from '../spool/spool-store.js';
import type { SpoolState } from '../spool/spool-store.js';

export interface ControlLinkView {
  connected: boolean;
  /** Since when the link is in its current state. */
  since: Date;
  /** While the link is down: its last error's code and advice (e.g. CREDENTIAL_EXPIRED: re-enroll). */
  problem?: { code: string; advice?: string; at: Date };
}

/**
 * The control link as /readyz shows it. A refusal's code and advice tell a monitor what to do (a
 * node whose credential expired serves on, ready, but must be re-enrolled); the refusal's message
 * stays in `zenova-node status`, since this port answers callers too.
 */
export interface ControlPlaneReadiness {
  connected: boolean;
  disconnectedSince: string | null;
  lastError?: { code: string; advice?: string; at: string };
}

export interface ReadinessDeps {
  holder: ConfigHolder;
  /** The control link's state; absent in stand-alone mode (no control plane). */
  controlLink?: () => ControlLinkView;
  /** True while the served config verified under the trust of an earlier enrollment (ConfigApplier.servesPreviousTrust). */
  previousEnrollment?: () => boolean;
  /** The spool's fill and failing writes; absent (or undefined) without a spool. */
  spool?: () => SpoolState | undefined;
  /** True once the control plane refused the node NODE_DELETED (the lease book's memory); absent without credit. */
  deleted?: () => boolean;
}

export interface ReadinessBody {
  ready: boolean;
  /** Why the node is not ready; absent when it is. */
  reason?: string;
  code?: 'ZN_ERR_NODE_NOT_READY' | 'ZN_ERR_SPOOL_FULL' | 'ZN_ERR_NODE_DELETED';
  configSource: 'local-file' | 'bundle' | null;
  configVersion: number | null;
  configAppliedAt: string | null;
  controlPlane: ControlPlaneReadiness | null;
  /**
   * Set while the node serves previous.json, older than a version it applied (current.json damaged),
   * or the config of its previous enrollment (re-enrolled while serving, no config from the new control plane yet).
   */
  configWarning?: string;
  /** Set while the spool is at its quota or cannot be written: what callers get and what to do. */
  spoolWarning?: string;
}

const DELETED_REASON = 'the control plane deleted this node: it refuses every caller request until it is re-enrolled (zenova-node status says more)';

export function readiness(deps: ReadinessDeps): ReadinessBody {
  const snapshot = deps.holder.current();
  const link = deps.controlLink?.();
  const controlPlane = link === undefined ? null : controlPlaneReadiness(link);
  // Before the not-ready answer too: a full or failing spool is reported whenever it is so.
  const spool = deps.spool?.();
  const spoolWarning = spool === undefined ? undefined : spoolProblem(spool);
  // Deleted: say so even before any config verified, as every caller request is refused so.
  const deleted = deps.deleted?.() === true;
  if (!snapshot.ready) {
    return {
      ready: false,
      ...(deleted ? { reason: DELETED_REASON, code: 'ZN_ERR_NODE_DELETED' as const } : { reason: snapshot.reason, code: 'ZN_ERR_NODE_NOT_READY' as const }),
      configSource: null,
      configVersion: null,
      configAppliedAt: null,
      controlPlane,
      ...(spoolWarning !== undefined ? { spoolWarning } : {}),
    };
  }
  const refusesAll = spool !== undefined && (spool.writeFailing !== null || (spool.full && spool.fullPolicy === 'reject'));
  const refusal = deleted
    ? { reason: DELETED_REASON, code: 'ZN_ERR_NODE_DELETED' as const }
    : refusesAll
      ? { reason: spoolWarning, code: 'ZN_ERR_SPOOL_FULL' as const }
      : undefined;
  return {
    ready: refusal === undefined,
    ...(refusal ?? {}),
    configSource: snapshot.config.source,
    configVersion: snapshot.config.version,
    configAppliedAt: snapshot.appliedAt.toISOString(),
    controlPlane,
    ...(deps.previousEnrollment?.() === true
      ? { configWarning: previousEnrollmentWarning(snapshot.config.version ?? 0) }
      : snapshot.olderThanApplied !== undefined
        ? { configWarning: olderConfigWarning(snapshot.config.version ?? 0, snapshot.olderThanApplied) }
        : {}),
    ...(spoolWarning !== undefined ? { spoolWarning } : {}),
  };
}

function controlPlaneReadiness(link: ControlLinkView): ControlPlaneReadiness {
  const base = { connected: link.connected, disconnectedSince: link.connected ? null : link.since.toISOString() };
  const problem = link.connected ? undefined : link.problem;
  if (problem === undefined) return base;
  return { ...base, lastError: { code: problem.code, at: problem.at.toISOString(), ...(problem.advice !== undefined ? { advice: problem.advice } : {}) } };
}

export function registerReadinessRoutes(app: FastifyInstance, deps: ReadinessDeps): void {
  app.get('/readyz', async (_request, reply) => {
    const body = readiness(deps);
    return reply.code(body.ready ? 200 : 503).send(body);
  });
}
