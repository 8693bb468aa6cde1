/**
 * The control link's policy, apart from the one-shot session (session.ts): keep a session open,
 * reconnect after any end with exponential back-off and jitter, fall back to the previous
 * credential when the current one is refused (until the previous one is refused too; a network
 * failure of that attempt does not count), and retry only slowly after refusals that need an
 * operator (expired or revoked credential, deleted node, incompatible protocol), unless a rotation
 * saved during that session gives a successor to try — while the node keeps serving callers. The link's state is kept in memory and mirrored to control-status.json.
 * A refusal that cuts the node off (deleted, or its last credential revoked: refusal-advice.ts
 * cutOffBy) is told to the channels, so the credit leases stop serving priced requests.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { ConfigPush } from '../../../proto/src/index.js';
import type { Logger } from '../logger.js';
import { loadCredentials, storeRotatedCredentialIfUnchanged } from '../state/credential-store.js';
import type { CredentialFile, StoredCredential } from '../state/credential-store.js';
import { loadIdentity } from '../state/identity.js';
import type { NodeIdentity } from '../state/identity.js';
import { StateAccessDeniedError } from '../state/state-store.js';
import type { StateStore } from '../state/state-store.js';
import { Backoff } from './backoff.js';
import type { ControlChannel, ControlCutOff } from './control-channel.js';
import { ControlPlaneTime, MAX_CLOCK_SKEW_MS, describeSkew } from './control-plane-time.js';
import { loadControlStatus, saveControlStatus } from './control-status.js';
import type { ConfigStatusRecord, ControlStatusRecord, SpoolStatusRecord } from './control-status.js';
import { FALLBACK_CODES, cutOffBy, needsOperator, refusalAdvice } from './refusal-advice.js';
import { runSession } from './session.js';
import type { ConfigPushResult, HeartbeatFigures, HelloConfigFacts, NodeFacts, SessionEnd } from './session.js';

export const DEFAULT_RECONNECT_BASE_MS = 1_000;
export const DEFAULT_RECONNECT_MAX_MS = 60_000;
/** Slow retry after refusals only an operator can fix (a re-enrollment may land meanwhile). */
export const DEFAULT_REFUSED_RETRY_MS = 5 * 60_000;
/** Retry after a state file this process may not read (refusal-advice.ts STATE_ACCESS_DENIED). */
export const ACCESS_DENIED_RETRY_MS = 30_000;
/**
 * While waiting out a refusal only an operator can fix (a revoked credential, a node not enrolled),
 * how often credential.json is read again: `enroll --reenroll` run while the node serves revokes the
 * old credential before it writes the new one, so the session it ends is refused first; the new
 * credential is taken within this, not after the whole wait.
 */
export const DEFAULT_CREDENTIAL_POLL_MS = 2_000;
/** A session that lasted this long was healthy: the back-off starts again from its first step. */
export const DEFAULT_HEALTHY_SESSION_MS = 30_000;

export type ControlLinkState = 'connecting' | 'connected' | 'disconnected';

export interface ControlLinkError {
  code: string;
  message: string;
  at: Date;
  advice?: string;
  /** Set once a session was established after the error: kept as history, no longer a problem. */
  resolvedAt?: Date;
}

export interface ControlLinkStatus {
  state: ControlLinkState;
  /** connected: since the session was established; otherwise since the link was lost (or start). */
  since: Date;
  lastError: ControlLinkError | null;
  sessionId: string | null;
}

export interface ConnectLoopOptions {
  store: StateStore;
  logger: Logger;
  facts: NodeFacts;
  figures: () => HeartbeatFigures;
  /** See SessionOptions.helloConfig. */
  helloConfig?: () => HelloConfigFacts;
  /** Applies a pushed config bundle (see SessionOptions.onConfigPush). */
  onConfigPush?: (push: ConfigPush) => Promise<ConfigPushResult>;
  /** Backfill and credit leases (control-channel.ts); handed to every session. */
  channels?: readonly ControlChannel[];
  /** The served config, mirrored into control-status.json for `status`. */
  configStatus?: () => ConfigStatusRecord;
  /** The spool's quota, fill and failing writes, mirrored likewise (undefined without a spool). */
  spoolStatus?: () => SpoolStatusRecord | undefined;
  /**
   * The identity read before each attempt (it is read afresh, so a re-enrollment while serving is
   * picked up): serve rebuilds the config applier's trust from it before the session can push.
   */
  onIdentity?: (identity: NodeIdentity) => void;
  reconnect?: { baseMs: number; maxMs: number };
  refusedRetryMs?: number;
  /** See DEFAULT_CREDENTIAL_POLL_MS. */
  credentialPollMs?: number;
  healthySessionMs?: number;
  helloTimeoutMs?: number;
  /** In [0, 1); for the back-off jitter. */
  random?: () => number;
  /**
   * Anchored to each HelloAck's server_time; serve hands the same one to the pipeline, which judges
   * control-plane expiries by it. A private one when absent.
   */
  controlPlaneTime?: ControlPlaneTime;
}

export interface ConnectLoop {
  status(): ControlLinkStatus;
  /** Rewrites control-status.json after the served config or the spool's state changed; resolves once written. */
  configChanged(): Promise<void>;
  /**
   * Ends the session and the loop; resolves once the final status is written. `handedOver`: this
   * process goes on serving while another holds the link: the status says disconnected for that
   * reason, written only while control-status.json is still this process's (the new holder's wins).
   */
  stop(options?: { handedOver?: { code: string; message: string } }): Promise<void>;
}

/** How the next attempt should go after a session ended. */
interface NextStep {
  delayMs: number;
  /**
   * Try credential.json's `previous` next: after the current one was refused, until `previous`
   * itself is refused in that streak (an attempt that failed for a network reason tries it again).
   */
  usePrevious: boolean;
}

export function startConnectLoop(opts: ConnectLoopOptions): ConnectLoop {
  const { store, logger } = opts;
  const backoff = new Backoff({
    baseMs: opts.reconnect?.baseMs ?? DEFAULT_RECONNECT_BASE_MS,
    maxMs: opts.reconnect?.maxMs ?? DEFAULT_RECONNECT_MAX_MS,
    ...(opts.random !== undefined ? { random: opts.random } : {}),
  });
  const refusedRetryMs = opts.refusedRetryMs ?? DEFAULT_REFUSED_RETRY_MS;
  const credentialPollMs = opts.credentialPollMs ?? DEFAULT_CREDENTIAL_POLL_MS;
  const healthySessionMs = opts.healthySessionMs ?? DEFAULT_HEALTHY_SESSION_MS;
  const abort = new AbortController();

  let status: ControlLinkStatus = { state: 'connecting', since: new Date(), lastError: null, sessionId: null };
  let serving = true;
  let writes: Promise<void> = Promise.resolve();
  const controlPlaneTime = opts.controlPlaneTime ?? new ControlPlaneTime();
  // The skew last warned about in this session (warned again only if it grows by another bound).
  let warnedSkewMs: number | undefined;

  /**
   * Warns when this host's clock is further from the control plane's than enrollment allows: once
   * per session, and again each time it grows by another bound. Checked on each HelloAck and
   * heartbeat, so a wall-clock step while connected is seen within one interval.
   */
  const checkClockSkew = (): void => {
    const skew = controlPlaneTime.skewMs();
    if (skew === null) return;
    const size = Math.abs(skew);
    if (size <= MAX_CLOCK_SKEW_MS) {
      if (warnedSkewMs !== undefined) logger.info({ skewMs: Math.round(skew), maxSkewMs: MAX_CLOCK_SKEW_MS }, "this host's clock is back in step with the control plane's");
      warnedSkewMs = undefined;
      return;
    }
    if (warnedSkewMs !== undefined && size < Math.abs(warnedSkewMs) + MAX_CLOCK_SKEW_MS) return;
    warnedSkewMs = skew;
    logger.warn(
      {
        code: 'CLOCK_SKEW',
        skewMs: Math.round(skew),
        maxSkewMs: MAX_CLOCK_SKEW_MS,
        hostClock: new Date().toISOString(),
        controlPlaneClock: new Date(controlPlaneTime.now()).toISOString(),
        advice: `this host's clock is ${describeSkew(skew)} the control plane's (at most ${MAX_CLOCK_SKEW_MS / 1000} s allowed); API-key and credit-lease expiries are judged by the control plane's time meanwhile: sync this host's clock (e.g. \`timedatectl set-ntp true\`)`,
      },
      "this host's clock is off from the control plane's",
    );
  };
  const figures = (): HeartbeatFigures => {
    checkClockSkew();
    return opts.figures();
  };

  /**
   * Queues a write of the current status; writes land in order and never fail the loop. Resolves
   * once this write is done, so a log line after it describes a status `zenova-node status` can see.
   */
  const persist = (): Promise<void> => {
    const record: ControlStatusRecord = {
      connected: status.state === 'connected',
      since: status.since.toISOString(),
      lastError:
        status.lastError === null
          ? null
          : {
              code: status.lastError.code,
              message: status.lastError.message,
              at: status.lastError.at.toISOString(),
              ...(status.lastError.advice !== undefined ? { advice: status.lastError.advice } : {}),
              ...(status.lastError.resolvedAt !== undefined ? { resolvedAt: status.lastError.resolvedAt.toISOString() } : {}),
            },
      sessionId: status.sessionId,
      ...(opts.configStatus !== undefined ? { config: opts.configStatus() } : {}),
      ...spoolRecord(),
      ...clockRecord(),
      pid: process.pid,
      serving,
      updatedAt: new Date().toISOString(),
    };
    writes = writes
      .then(() => saveControlStatus(store, record))
      .catch((err: unknown) => logger.warn({ err: { message: (err as Error).message } }, 'could not write control-status.json'));
    return writes;
  };

  const spoolRecord = (): Pick<ControlStatusRecord, 'spool'> => {
    const spool = opts.spoolStatus?.();
    return spool === undefined ? {} : { spool };
  };

  /**
   * The control plane's time as last anchored, for `status` (which works out the skew now from it)
   * and for the next start: also an anchor this process only adopted (a restart while the control
   * plane is out of reach), or the restart after it would judge expiries by the host's clock again.
   */
  const clockRecord = (): Pick<ControlStatusRecord, 'clock'> => {
    const anchor = controlPlaneTime.anchor();
    const skew = controlPlaneTime.skewMs();
    const measuredAt = controlPlaneTime.measuredAt();
    if (anchor === undefined || skew === null || measuredAt === undefined) return {};
    return { clock: { ...anchor, skewMs: Math.round(skew), measuredAt, maxSkewMs: MAX_CLOCK_SKEW_MS } };
  };

  const recordError = (code: string, message: string): boolean => {
    // After a resolved error, the same code again is a new problem, not the same streak.
    const changed = status.lastError === null || status.lastError.resolvedAt !== undefined || status.lastError.code !== code;
    const advice = refusalAdvice(code);
    status = { ...status, lastError: { code, message, at: new Date(), ...(advice !== undefined ? { advice } : {}) } };
    return changed;
  };

  const decide = (end: SessionEnd, usedPrevious: boolean, credentials: CredentialFile, fallbackSpent: boolean): NextStep => {
    if (end.reason === 'refused' && FALLBACK_CODES.has(end.code) && !usedPrevious && !fallbackSpent && credentials.previous !== undefined) {
      // The rotation may not have reached the control plane (crash between write and ack).
      return { delayMs: backoff.next(), usePrevious: true };
    }
    if (usedPrevious && end.reason !== 'refused' && !end.established) {
      // The fallback attempt never got an answer (reset, unreachable, hello timeout): the current
      // credential was refused, so trying it again would only be refused again.
      return { delayMs: backoff.next(), usePrevious: true };
    }
    if (end.reason === 'refused' && needsOperator(end.code)) return { delayMs: refusedRetryMs, usePrevious: false };
    if (end.established && end.establishedMs >= healthySessionMs) backoff.reset();
    return { delayMs: backoff.next(), usePrevious: false };
  };

  /** True when credential.json's current credential is no longer `used` (a rotation was saved). */
  const credentialReplaced = async (used: StoredCredential): Promise<boolean> => {
    try {
      const now = await loadCredentials(store);
      return now !== undefined && now.current.id !== used.id;
    } catch {
      return false;
    }
  };

  const logEnd = (end: SessionEnd, step: NextStep, firstOfStreak: boolean): void => {
    const advice = refusalAdvice(end.code);
    const fields = {
      code: end.code,
      reason: end.reason,
      message: end.message,
      established: end.established,
      ...(end.sessionId !== undefined ? { sessionId: end.sessionId } : {}),
      retryInMs: step.delayMs,
      ...(step.usePrevious ? { next: 'retrying with the previous credential' } : {}),
      ...(advice !== undefined ? { advice } : {}),
    };
    if (end.reason === 'refused' && needsOperator(end.code) && !step.usePrevious) logger.error(fields, 'control session ended');
    else if (end.established || end.reason === 'refused' || firstOfStreak) logger.warn(fields, 'control session ended');
    // The same connection failure again and again during an outage: one warn line is enough.
    else logger.debug(fields, 'control session ended');
  };

  /**
   * Waits `ms`, or, given `replaced`, until it says the credential was replaced (checked every
   * credentialPollMs): then the next attempt comes at once.
   */
  const waitBeforeRetry = async (ms: number, replaced?: () => Promise<boolean>): Promise<void> => {
    // Monotonic: a wall clock stepped back (NTP, a resumed VM) must not stretch the wait.
    const until = performance.now() + ms;
    try {
      for (;;) {
        const left = until - performance.now();
        if (left <= 0) return;
        await sleep(replaced === undefined ? left : Math.min(left, credentialPollMs), undefined, { signal: abort.signal });
        if (replaced !== undefined && (await replaced())) {
          logger.info('credential.json holds a new credential (a re-enrollment, or a rotation saved meanwhile): connecting with it now');
          return;
        }
      }
    } catch {
      // Aborted: the loop checks the signal itself.
    }
  };

  /**
   * Tells the channels the node is cut off (the credit leases then stop serving priced requests,
   * each replica through the lease store): before the wait, so nothing is served from them meanwhile.
   */
  const cutOff = (cut: ControlCutOff): void => {
    for (const channel of opts.channels ?? []) {
      try {
        channel.onCutOff?.(cut);
      } catch (err) {
        logger.error({ err, channel: channel.name, code: cut.code }, 'a control channel failed to take the node being cut off');
      }
    }
  };

  /** True once the state dir holds an identity and a credential (a node enrolled while it waited). */
  const enrolledNow = async (): Promise<boolean> => {
    try {
      return (await loadIdentity(store)) !== undefined && (await loadCredentials(store)) !== undefined;
    } catch {
      return false;
    }
  };

  /**
   * One session with `credential`, taken from `credentials` (credential.json as this attempt read
   * it); never throws (a failure to even start is a disconnection).
   */
  const connectOnce = async (identity: NodeIdentity, credentials: CredentialFile, credential: StoredCredential, onEstablished: () => void): Promise<SessionEnd> => {
    // What credential.json must still hold for a rotation to be stored: what the session started
    // from, then its own last write (storeRotatedCredentialIfUnchanged).
    let expected = credentials;
    try {
      return await runSession({
        identity,
        credential,
        facts: opts.facts,
        figures,
        ...(opts.helloConfig !== undefined ? { helloConfig: opts.helloConfig } : {}),
        ...(opts.onConfigPush !== undefined ? { onConfigPush: opts.onConfigPush } : {}),
        ...(opts.channels !== undefined ? { channels: opts.channels } : {}),
        logger,
        signal: abort.signal,
        ...(opts.helloTimeoutMs !== undefined ? { helloTimeoutMs: opts.helloTimeoutMs } : {}),
        storeRotatedCredential: async (next, inUse) => {
          const outcome = await storeRotatedCredentialIfUnchanged(store, next, inUse, expected);
          if (!outcome.stored) return outcome;
          expected = outcome.file;
          return undefined;
        },
        onEstablished: (info) => {
          onEstablished();
          const now = new Date();
          if (Number.isSafeInteger(info.serverTimeMs) && info.serverTimeMs > 0) {
            controlPlaneTime.observe(info.serverTimeMs, info.helloRoundTripMs);
            warnedSkewMs = undefined;
            checkClockSkew();
          }
          // The outage is over: its error stays as history, but `status` must not show it as current.
          const lastError = status.lastError === null ? null : { ...status.lastError, resolvedAt: status.lastError.resolvedAt ?? now };
          status = { ...status, state: 'connected', since: now, sessionId: info.sessionId, lastError };
          void persist().then(() =>
            logger.info(
              { sessionId: info.sessionId, nodeId: identity.nodeId, gateway: identity.gateway.target, heartbeatIntervalMs: info.heartbeatIntervalMs },
              'control session established',
            ),
          );
        },
      });
    } catch (err) {
      // A bug or an unusable saved identity must not end the loop: record it and retry later.
      return { reason: 'disconnected', code: 'SESSION_ERROR', message: (err as Error).message, established: false, establishedMs: 0 };
    }
  };

  const loop = async (): Promise<void> => {
    await persist();
    let usePrevious = false;
    let fallbackSpent = false;
    while (!abort.signal.aborted) {
      let identity: NodeIdentity | undefined;
      let credentials: CredentialFile | undefined;
      try {
        // Read afresh each attempt: a re-enrollment while serving is picked up without a restart.
        identity = await loadIdentity(store);
        credentials = await loadCredentials(store);
      } catch (err) {
        // A file this process may not read (written by a command run with sudo) is not damaged:
        // its own code, whose advice gives it back rather than re-enrolling.
        // Retried sooner: a chown may come any moment, and reading two small files costs nothing.
        const denied = err instanceof StateAccessDeniedError;
        const code = denied ? 'STATE_ACCESS_DENIED' : 'STATE_INVALID';
        const retryInMs = denied ? Math.min(refusedRetryMs, ACCESS_DENIED_RETRY_MS) : refusedRetryMs;
        if (recordError(code, (err as Error).message)) await persist();
        logger.error({ code, message: (err as Error).message, retryInMs, advice: refusalAdvice(code) }, 'control session ended');
        await waitBeforeRetry(retryInMs);
        continue;
      }
      if (identity === undefined || credentials === undefined) {
        const message = `${store.dir} holds no ${identity === undefined ? 'identity' : 'credential'}: run \`zenova-node enroll\``;
        if (recordError('NOT_ENROLLED', message)) await persist();
        logger.error({ code: 'NOT_ENROLLED', message, retryInMs: refusedRetryMs }, 'control session ended');
        await waitBeforeRetry(refusedRetryMs, enrolledNow);
        continue;
      }
      try {
        opts.onIdentity?.(identity);
      } catch (err) {
        logger.error({ err }, 'could not take the identity in use');
      }
      const usedPrevious = usePrevious && credentials.previous !== undefined;
      const credential: StoredCredential = usedPrevious && credentials.previous !== undefined ? credentials.previous : credentials.current;
      if (status.state !== 'connected') status = { ...status, state: 'connecting' };

      const end = await connectOnce(identity, credentials, credential, () => {
        fallbackSpent = false;
      });
      if (end.reason === 'stopped') break;
      // Spent only once `previous` itself is refused at the door; an attempt cut by the network
      // tries it again, and so does one whose session came up first (then ended by a refusal such
      // as SERVER_SHUTTING_DOWN or SESSION_REPLACED: `previous` was accepted).
      if (usedPrevious && end.reason === 'refused' && !end.established) fallbackSpent = true;

      let step = decide(end, usedPrevious, credentials, fallbackSpent);
      const replaced = end.reason === 'refused' && needsOperator(end.code) && (await credentialReplaced(credential));
      if (replaced) {
        // A rotation saved during the session (its ack lost, or the gateway ended the session on
        // the credential it replaced): the successor is not what was refused, so try it soon.
        step = { delayMs: backoff.next(), usePrevious: false };
      }
      usePrevious = step.usePrevious;
      const cut = cutOffBy(end, { usePrevious: step.usePrevious, credentialReplaced: replaced });
      if (cut !== undefined) cutOff(cut);
      const firstOfStreak = recordError(end.code, end.message);
      if (end.established) status = { ...status, state: 'disconnected', since: new Date(), sessionId: null };
      else status = { ...status, state: 'disconnected' };
      if (end.established || firstOfStreak) await persist();
      logEnd(end, step, firstOfStreak);
      // A refusal only an operator fixes: the fix may be a re-enrollment writing credential.json now.
      const waitsForOperator = end.reason === 'refused' && needsOperator(end.code) && !step.usePrevious;
      await waitBeforeRetry(step.delayMs, waitsForOperator ? () => credentialReplaced(credential) : undefined);
    }
  };

  const done = loop().catch((err: unknown) => {
    // Nothing above should throw; if it does, serving callers matters more than the link.
    logger.error({ err }, 'the control connect loop failed; the node keeps serving without a control plane');
  });

  return {
    status: () => status,
    configChanged: () => persist(),
    async stop(options) {
      abort.abort();
      await done;
      status = { ...status, state: 'disconnected', ...(status.state === 'connected' ? { since: new Date(), sessionId: null } : {}) };
      if (options?.handedOver !== undefined) {
        recordError(options.handedOver.code, options.handedOver.message);
        await writes;
        const current = await loadControlStatus(store).catch(() => undefined);
        if (current !== undefined && current.pid !== process.pid) return;
      } else serving = false;
      await persist();
    },
  };
}
