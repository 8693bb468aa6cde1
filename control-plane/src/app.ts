/**
 * The control plane's HTTP application (console + API). A factory that never listens: main.ts
 * listens, tests use `app.inject`. Routes live one plugin per file under http/.
 */
import Fastify from 'fastify';
import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import type pg from 'pg';
import type pino from 'pino';
import type { SecretBox } from './crypto/secret-box.js';
import { accountsRoutes } from './http/accounts.routes.js';
import { adminAuth } from './http/admin-auth.js';
import { apiKeysRoutes } from './http/api-keys.routes.js';
import { billingRoutes } from './http/billing.routes.js';
import { configVersionRoutes } from './http/config-version.routes.js';
import { enrollmentRoutes } from './http/enrollment.routes.js';
import { clientErrorHandler } from './http/client-error.js';
import { errorHandler, frameworkErrorHandler, MAX_PATH_PARAM_CHARS, notFoundHandler } from './http/error-handler.js';
import { healthRoutes } from './http/health.routes.js';
import { refuseEncodedBody } from './http/content-encoding.js';
import { refuseNonUtf8Json } from './http/json-charset.js';
import { repeatedJsonKey } from './http/duplicate-json-keys.js';
import { shownFieldName } from './config/config-fields.js';
import { modelRoutesRoutes } from './http/model-routes.routes.js';
import { nodesRoutes } from './http/nodes.routes.js';
import { policiesRoutes } from './http/policies.routes.js';
import { pricesRoutes } from './http/prices.routes.js';
import { noStore } from './http/no-store.js';
import { echoRequestId, generateRequestId } from './http/request-id.js';
import { createFailedAdminAuthLimiter } from './http/failed-auth-limit.js';
import { requestsRoutes } from './http/requests.routes.js';
import { toolServersRoutes } from './http/tool-servers.routes.js';
import { upstreamsRoutes } from './http/upstreams.routes.js';
import { versionRoutes } from './http/version.routes.js';
import { whoamiRoutes } from './http/whoami.routes.js';
import { noQuerySchema, zodSerializerCompiler, zodValidatorCompiler } from './http/zod-schemas.js';
import type { EnrollmentDeps } from './nodes/enrollment.js';
import type { Settings } from './settings.js';
import { zenovaError } from './errors.js';
import { consoleAssetsRoutes } from './console/console-assets.routes.js';
import { consoleSessionRoutes } from './console/console-session.routes.js';
import { keyNamingJsonParser } from '../../proto/src/json-body-parser.js';

export const BODY_LIMIT_BYTES = 1024 * 1024;
export const ADMIN_API_PREFIX = '/api/v1';

const NOT_UTF8_BODY = 'The request body is not valid UTF-8 (is it in another encoding, such as Latin-1 or Windows-1252?); send the JSON body encoded as UTF-8.';

// Fatal: a lenient decode turns each invalid byte into U+FFFD, so `M\xFCller` and `M\xF6ller` were
// stored as the same text (one top-up reference replaying the other). ignoreBOM keeps a leading
// byte order mark in the text, where the JSON parser skips it as it always has.
const utf8Decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** The body's text; undefined when its bytes are not UTF-8. */
function decodeUtf8Body(bytes: Buffer | string): string | undefined {
  // Fastify's type allows a string; with parseAs 'buffer' it hands over the bytes.
  if (typeof bytes === 'string') return bytes;
  try {
    return utf8Decoder.decode(bytes);
  } catch {
    return undefined;
  }
}

export interface AppDeps {
  settings: Settings;
  pool: pg.Pool;
  logger: pino.Logger;
  /**
   * The gateway side of enrollment (gateway target and CA, config-signing key). Optional so a
   * process without a node gateway still serves the console/API; enrollment then answers 503.
   */
  enrollment?: EnrollmentDeps | undefined;
  /**
   * Seals provider secrets (ZENOVA_SECRET_ENC_KEY). Optional so a process without the key still
   * serves the API; storing an upstream's apiKey then answers 503 ZN_ERR_CP_SECRETS_UNAVAILABLE.
   */
  secretBox?: SecretBox | undefined;
}

export async function buildApp(deps: AppDeps): Promise<FastifyInstance> {
  // Typed as fastify's logger interface so the instance is a plain FastifyInstance.
  const loggerInstance: FastifyBaseLogger = deps.logger;
  const app = Fastify({
    loggerInstance,
    bodyLimit: BODY_LIMIT_BYTES,
    genReqId: generateRequestId,
    // Behind a proxy it must be named (ZENOVA_TRUSTED_PROXIES); X-Forwarded-* is never trusted by default.
    trustProxy: deps.settings.trustedProxies.length === 0 ? false : [...deps.settings.trustedProxies],
    // Slow-loris guards: a client gets this long to send its headers / whole request.
    requestTimeout: 60_000,
    // Fastify's default (100) is below the 128 characters a name may have: such a name could be
    // created but not reached by its path.
    routerOptions: { maxParamLength: MAX_PATH_PARAM_CHARS },
    // Router errors skip the error handler; without this they answer in fastify's own shape.
    frameworkErrors: frameworkErrorHandler,
    // Requests the HTTP parser refuses: our body and x-request-id, and no raw bytes in the log.
    clientErrorHandler: clientErrorHandler(deps.logger),
  });

  // Every body is JSON (415 otherwise): fastify's built-in text/plain parser would hand a string
  // to the routes, which then refuse it as "not a JSON object" (400).
  app.removeContentTypeParser('text/plain');
  const jsonParser = keyNamingJsonParser(app.getDefaultJsonParser('error', 'error'), () =>
    zenovaError('ZN_ERR_CP_INVALID_REQUEST', 'The request body has a "__proto__" or "constructor.prototype" key, which the control plane does not accept; remove it.'));
  // Many HTTP clients label every request JSON, a body-less POST /revoke or DELETE too: an empty
  // body is no body (a route that needs one still says so), not "invalid JSON".
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => {
    const text = decodeUtf8Body(body);
    if (text === undefined) {
      done(zenovaError('ZN_ERR_CP_INVALID_REQUEST', NOT_UTF8_BODY), undefined);
      return;
    }
    if (text.length === 0) done(null, undefined);
    else {
      return jsonParser(request, text, (err, value) => {
        const repeated = err === null || err === undefined ? repeatedJsonKey(text) : undefined;
        if (repeated === undefined) done(err, value);
        else {
          // Quoted only when shaped like a field name: a pasted secret used as a key is not echoed.
          const shown = shownFieldName(repeated);
          const quoted = shown === repeated ? JSON.stringify(repeated) : shown;
          done(zenovaError('ZN_ERR_CP_INVALID_REQUEST', `The request body writes the key ${quoted} twice in one object; send each key once.`), undefined);
        }
      });
    }
  });

  app.setValidatorCompiler(zodValidatorCompiler);
  app.setSerializerCompiler(zodSerializerCompiler);
  app.setErrorHandler(errorHandler);
  app.setNotFoundHandler(notFoundHandler);
  app.addHook('onRequest', echoRequestId);
  app.addHook('onRequest', noStore);
  app.addHook('preParsing', refuseNonUtf8Json);
  app.addHook('preParsing', refuseEncodedBody);

  await app.register(healthRoutes, { pool: deps.pool });
  await app.register(versionRoutes, { pool: deps.pool });
  // Enrollment sits outside /api/v1: a node proves itself with its install token, not the admin token.
  await app.register(enrollmentRoutes, { pool: deps.pool, settings: deps.settings, enrollment: deps.enrollment });

  // The console (docs/console.md): its static files, and the session a browser holds instead of
  // the admin token.
  await app.register(consoleAssetsRoutes);
  // One failed-admin-token budget per address for the login and the admin API's bearer token, so
  // a guesser cannot take 10 a minute at each.
  const failedAuthLimiter = createFailedAdminAuthLimiter();
  await app.register(consoleSessionRoutes, { pool: deps.pool, settings: deps.settings, failedAuthLimiter });

  // The admin API: everything under /api/v1 sits behind the admin bearer token or a console
  // session — including its own 404s, so an unauthenticated caller cannot probe which admin
  // routes exist.
  await app.register(async (adminApi) => {
    await adminApi.register(adminAuth, { adminToken: deps.settings.adminToken, pool: deps.pool, failedAuthLimiter });
    adminApi.setNotFoundHandler(notFoundHandler);
    // Every admin route's query is strict, not only the lists': a route that declares no query
    // takes none. Ignored, a `?reference=` given to a top-up credited again on its retry, and a
    // `?dryRun=true` created what it was meant to try.
    adminApi.addHook('onRoute', (route) => {
      route.schema ??= {};
      route.schema.querystring ??= noQuerySchema;
    });
    // The query parser keeps a malformed %-escape as it is (`?keyId=%E0%A4%A` filtered on those
    // characters and found nothing); refused as the same escape in the path is.
    adminApi.addHook('preValidation', async (request) => {
      const query = request.url.indexOf('?');
      if (query === -1) return;
      try {
        decodeURIComponent(request.url.slice(query + 1));
      } catch {
        throw zenovaError('ZN_ERR_CP_INVALID_REQUEST', 'The URL query cannot be decoded (a malformed %-escape or invalid UTF-8); percent-encode each value as UTF-8.');
      }
    });
    await adminApi.register(whoamiRoutes);
    await adminApi.register(nodesRoutes, { pool: deps.pool, settings: deps.settings });
    // The config model nodes serve from; every mutation records a config version.
    await adminApi.register(configVersionRoutes, { pool: deps.pool });
    await adminApi.register(accountsRoutes, { pool: deps.pool });
    await adminApi.register(apiKeysRoutes, { pool: deps.pool });
    await adminApi.register(upstreamsRoutes, { pool: deps.pool, secretBox: deps.secretBox });
    await adminApi.register(modelRoutesRoutes, { pool: deps.pool });
    await adminApi.register(policiesRoutes, { pool: deps.pool });
    await adminApi.register(pricesRoutes, { pool: deps.pool });
    await adminApi.register(toolServersRoutes, { pool: deps.pool, secretBox: deps.secretBox });
    await adminApi.register(requestsRoutes, { pool: deps.pool, secretBox: deps.secretBox });
    await adminApi.register(billingRoutes, { pool: deps.pool, secretBox: deps.secretBox });
  }, { prefix: ADMIN_API_PREFIX });

  return app;
}
