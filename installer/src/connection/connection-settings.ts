/**
 * Where the admin API is and how to authenticate to it: ZENOVA_CONTROL_PLANE_URL,
 * ZENOVA_ADMIN_TOKEN and (optional) ZENOVA_CA_FILE, taken as one set from one place so a token is
 * never sent to a URL from somewhere else:
 *   1. `--env-file F`: the three variables come from F only;
 *   2. otherwise the environment, when any of the three is set there;
 *   3. otherwise the dev stack's dev.env, if present: `$ZENOVA_DEV_HOME/dev.env` when ZENOVA_DEV_HOME
 *      is set (as for `npm start`), else `.zenova/dev.env` in the working directory. With
 *      ZENOVA_DEV_HOME set the default file is never read: it belongs to another dev stack.
 */
import { X509Certificate } from 'node:crypto';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { UsageError } from '../cli-context.js';
import type { CliContext } from '../cli-context.js';
import { LocalFileError, readRegularFile } from '../local-files.js';
import { EnvFileError, readEnvFile } from './env-file.js';
import { isLoopbackHost } from '../../../proto/src/loopback-host.js';

export const URL_VARIABLE = 'ZENOVA_CONTROL_PLANE_URL';
export const TOKEN_VARIABLE = 'ZENOVA_ADMIN_TOKEN';
export const CA_VARIABLE = 'ZENOVA_CA_FILE';
export const CONNECTION_VARIABLES = [URL_VARIABLE, TOKEN_VARIABLE, CA_VARIABLE] as const;
export const DEFAULT_ENV_FILE = path.join('.zenova', 'dev.env');
export const DEV_HOME_VARIABLE = 'ZENOVA_DEV_HOME';

/** The dev.env the dev stack writes, as shown to people and as a path from `cwd`. */
function devEnvFile(ctx: CliContext): { shown: string; file: string; fromDevHome: boolean } {
  const devHome = ctx.env[DEV_HOME_VARIABLE]?.trim();
  // Where control-plane/src/dev-stack/main.ts writes it: DIR/dev.env, DIR resolved like it does.
  if (devHome) return { shown: path.join(devHome, 'dev.env'), file: path.resolve(ctx.cwd, devHome, 'dev.env'), fromDevHome: true };
  return { shown: DEFAULT_ENV_FILE, file: path.join(ctx.cwd, DEFAULT_ENV_FILE), fromDevHome: false };
}

const MAX_CA_FILE_BYTES = 256 * 1024;

export interface ConnectionSettings {
  /** The API's base, always ending in '/', so relative paths resolve beneath it. */
  baseUrl: URL;
  /** ZENOVA_CONTROL_PLANE_URL as shown to people: no trailing slash, never credentials. */
  displayUrl: string;
  adminToken: string;
  /** PEM of the CA(s) that verify the control plane's HTTPS; absent = the default trust store. */
  caPem: string | undefined;
  caFile: string | undefined;
  /** For messages: "the environment" or "env file F". */
  source: string;
}

interface VariableSource {
  values: Partial<Record<(typeof CONNECTION_VARIABLES)[number], string>>;
  source: string;
}

function pick(from: Readonly<Record<string, string | undefined>>): VariableSource['values'] {
  const values: VariableSource['values'] = {};
  for (const name of CONNECTION_VARIABLES) {
    const value = from[name]?.trim();
    if (value) values[name] = value;
  }
  return values;
}

function loadEnvFile(ctx: CliContext, file: string, helpCommand: string, option?: string): Record<string, string> {
  try {
    // A warning (an env file others may read) goes where the command's own output goes.
    return readEnvFile(file, option, (line) => ctx.stderr.write(line));
  } catch (err) {
    if (err instanceof EnvFileError) throw new UsageError(err.message, helpCommand);
    throw err;
  }
}

function variableSource(ctx: CliContext, envFile: string | undefined, helpCommand: string): VariableSource {
  if (envFile !== undefined) {
    const file = path.resolve(ctx.cwd, envFile);
    return { values: pick(loadEnvFile(ctx, file, helpCommand, '--env-file')), source: `env file ${envFile}` };
  }
  const fromEnv = pick(ctx.env);
  if (Object.keys(fromEnv).length > 0) return { values: fromEnv, source: 'the environment' };
  const devEnv = devEnvFile(ctx);
  const named = devEnv.fromDevHome ? ` (${DEV_HOME_VARIABLE})` : '';
  if (existsSync(devEnv.file)) return { values: pick(loadEnvFile(ctx, devEnv.file, helpCommand)), source: `env file ${devEnv.shown}${named}` };
  return { values: {}, source: devEnv.fromDevHome ? `the environment and ${devEnv.shown}${named}, which does not exist` : 'the environment' };
}

function parseBaseUrl(raw: string, source: string, helpCommand: string): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new UsageError(`${URL_VARIABLE} (from ${source}) is not a URL: expected https://HOST:PORT`, helpCommand);
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') {
    throw new UsageError(`${URL_VARIABLE} (from ${source}) must start with https:// (or http:// for a local development control plane)`, helpCommand);
  }
  if (url.username !== '' || url.password !== '') {
    throw new UsageError(`${URL_VARIABLE} (from ${source}) must not carry a user name or password; the admin token goes in ${TOKEN_VARIABLE}`, helpCommand);
  }
  url.search = '';
  url.hash = '';
  if (!url.pathname.endsWith('/')) url.pathname += '/';
  return url;
}

function readCaFile(file: string, source: string, helpCommand: string): string {
  let pem: string;
  try {
    pem = readRegularFile(file, MAX_CA_FILE_BYTES);
  } catch (err) {
    if (!(err instanceof LocalFileError)) throw err;
    if (err.kind === 'unreadable') throw new UsageError(`cannot read ${CA_VARIABLE} ${file} (from ${source}): ${err.message}`, helpCommand);
    throw new UsageError(`${CA_VARIABLE} ${file} (from ${source}) ${err.message}; expected a PEM certificate`, helpCommand);
  }
  try {
    new X509Certificate(pem);
  } catch {
    throw new UsageError(`${CA_VARIABLE} ${file} (from ${source}) is not a PEM certificate`, helpCommand);
  }
  return pem;
}

export function resolveConnection(ctx: CliContext, envFile: string | undefined, helpCommand: string): ConnectionSettings {
  const { values, source } = variableSource(ctx, envFile, helpCommand);
  const rawUrl = values[URL_VARIABLE];
  if (rawUrl === undefined) {
    throw new UsageError(
      `${URL_VARIABLE} is not set (looked in ${source}): set it to the control plane's URL, e.g. https://cp.example.com:7400, ` +
        `or pass --env-file F (the dev stack writes ${devEnvFile(ctx).shown}); under sudo, which drops the caller's environment, use --env-file ` +
        `or sudo --preserve-env=${URL_VARIABLE},${TOKEN_VARIABLE},${CA_VARIABLE}`,
      helpCommand,
    );
  }
  const baseUrl = parseBaseUrl(rawUrl, source, helpCommand);
  const adminToken = values[TOKEN_VARIABLE];
  if (adminToken === undefined) {
    throw new UsageError(`${TOKEN_VARIABLE} is not set (looked in ${source}): set it to the control plane's admin token`, helpCommand);
  }
  // An HTTP header carries visible ASCII only: another character (a pasted “curly quote”, a letter
  // outside Latin-1) failed inside the HTTP client and read as "cannot reach the control plane".
  if (!/^[\x21-\x7e]+$/.test(adminToken)) {
    throw new UsageError(
      `${TOKEN_VARIABLE} (from ${source}) holds a character an admin token never has (a space, a control character, or one outside ASCII such as a curly quote): ` +
        'set it to the token exactly as the control plane was given it, without quotes pasted from a document',
      helpCommand,
    );
  }
  const caFileSetting = values[CA_VARIABLE];
  const caFile = caFileSetting === undefined ? undefined : path.resolve(ctx.cwd, caFileSetting);
  const caPem = caFile === undefined ? undefined : readCaFile(caFile, source, helpCommand);
  if (baseUrl.protocol === 'http:' && !isLoopbackHost(baseUrl.hostname)) {
    ctx.stderr.write(`zenova: warning: ${URL_VARIABLE} uses plain http:// to ${baseUrl.host}; the admin token crosses the network unencrypted\n`);
  }
  const displayUrl = baseUrl.href.replace(/\/$/, '');
  return { baseUrl, displayUrl, adminToken, caPem, caFile, source };
}
