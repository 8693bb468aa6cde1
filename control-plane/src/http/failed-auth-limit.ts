/**
 * One failed-admin-token budget per client address for both places the admin token is checked:
 * `POST /api/console/login` and the bearer token on `/api/v1/*` (docs/console.md, docs/api.md).
 * Sharing it means a guesser gets 10 tries a minute in all, not 10 per door. Keyed as the login
 * always was (loginLimitKey: IPv4 address, IPv6 /64), in memory per replica, with a cap on the
 * addresses remembered so a flood of source addresses cannot grow memory without end.
 */
import type { FastifyReply } from 'fastify';
import { FailedLoginLimiter, loginLimitKey } from '../console/console-sessions.js';
import { zenovaError } from '../errors.js';

export const FAILED_ADMIN_AUTHS_PER_MINUTE = 10;
const FAILED_ADMIN_AUTH_WINDOW_MS = 60_000;
/** Addresses remembered at once; past it, finished windows go first, then the oldest running ones. */
export const FAILED_ADMIN_AUTH_MAX_ADDRESSES = 10_000;

export function createFailedAdminAuthLimiter(
  perMinute: number = FAILED_ADMIN_AUTHS_PER_MINUTE,
  maxAddresses: number = FAILED_ADMIN_AUTH_MAX_ADDRESSES,
): FailedLoginLimiter {
  return new FailedLoginLimiter(perMinute, FAILED_ADMIN_AUTH_WINDOW_MS, maxAddresses);
}

/** The budget's key for a request's client address (request.ip: behind a named proxy, the forwarded one). */
export const failedAdminAuthKey = loginLimitKey;

/**
 * Throws the lockout refusal (429 ZN_ERR_CP_LOGIN_RATE_LIMITED with Retry-After) while `key` is
 * over the budget. Called before the token is compared, so during a lockout the right token is
 * refused too and the answer says nothing about the guess.
 */
export function refuseWhileLockedOut(limiter: FailedLoginLimiter, key: string, reply: FastifyReply): void {
  const decision = limiter.check(key);
  if (decision.allowed) return;
  void reply.header('retry-after', String(decision.retryAfterSeconds));
  throw zenovaError(
    'ZN_ERR_CP_LOGIN_RATE_LIMITED',
    `Too many failed admin token attempts (console logins and admin API bearer tokens) from this address; try again in ${decision.retryAfterSeconds} s.`,
  );
}
