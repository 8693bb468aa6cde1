/**
 * The console's static files (docs/console.md): `GET /` and `GET /console` redirect to
 * `/console/`, which answers `ui/index.html`; `GET /console/assets/<file>` answers a file of `ui/`
 * from an allow-list made once at start by reading the directory (`*.js`, `*.css`, `pages/*.js`).
 * A path is looked up in that list, never joined onto the disk path, so `..` or any other file
 * cannot be reached. Every answer under /console carries a strict CSP (scripts and styles from this
 * origin only, nothing inline, no framing) and the other security headers, the app's own 404s and
 * 400s included.
 */
import { readdirSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { notFoundHandler } from '../http/error-handler.js';

export const CONSOLE_PATH = '/console/';
export const CONSOLE_ASSETS_PATH = '/console/assets/';
export const DEFAULT_CONSOLE_UI_DIR = fileURLToPath(new URL('./ui/', import.meta.url));

export const CONSOLE_CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  // data: for the empty favicon index.html names, so the browser does not ask for /favicon.ico.
  "img-src 'self' data:",
  "connect-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

const CONTENT_TYPES: Record<string, string> = {
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.html': 'text/html; charset=utf-8',
};

/** `app.js`, `console.css`, `pages/nodes-list.js`, …: the names `/console/assets/` serves. */
export function consoleAssetNames(uiDir: string): string[] {
  const names: string[] = [];
  const pick = (dir: string, prefix: string, exts: string[]): void => {
    let entries;
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch {
      return;
    }
    for (const entry of entries) {
      if (entry.isFile() && exts.includes(path.extname(entry.name)) && /^[A-Za-z0-9_-][A-Za-z0-9._-]*$/.test(entry.name)) {
        names.push(`${prefix}${entry.name}`);
      }
    }
  };
  pick(uiDir, '', ['.js', '.css']);
  pick(path.join(uiDir, 'pages'), 'pages/', ['.js']);
  return names.sort();
}

function securityHeaders(reply: FastifyReply): void {
  void reply.header('content-security-policy', CONSOLE_CSP);
  void reply.header('x-content-type-options', 'nosniff');
  void reply.header('referrer-policy', 'no-referrer');
  void reply.header('x-frame-options', 'DENY');
}

/** `/console`, `/console/…`, `/console?…`: a path the console's security headers go on (not `/consoles`). */
export function isConsoleUrl(url: string): boolean {
  return /^\/console(?:[/?#]|$)/.test(url);
}

/**
 * The console's security headers when the request is for a /console URL. Also for the router's
 * own refusals (a bad %-escape), which run no hooks: the frameworkErrors handler must call it.
 */
export function consoleSecurityHeaders(request: FastifyRequest, reply: FastifyReply): void {
  if (isConsoleUrl(request.url)) securityHeaders(reply);
}

export interface ConsoleAssetsRoutesOptions {
  /** Test seam; the product serves the ui/ folder beside this file. */
  uiDir?: string;
}

export const consoleAssetsRoutes: FastifyPluginAsync<ConsoleAssetsRoutesOptions> = async (app, opts) => {
  const uiDir = opts.uiDir ?? DEFAULT_CONSOLE_UI_DIR;
  const files = new Map(consoleAssetNames(uiDir).map((name) => [name, path.join(uiDir, ...name.split('/'))]));

  const redirect = async (_request: unknown, reply: FastifyReply): Promise<void> => {
    await reply.redirect(CONSOLE_PATH, 302);
  };
  // On the app itself (skip-override below): the global 404 and error handlers answer
  // /console/nope, /console/index.html and the like, outside this plugin's routes.
  app.addHook('onRequest', async (request, reply) => consoleSecurityHeaders(request, reply));

  app.get('/', redirect);
  app.get('/console', redirect);

  app.get(CONSOLE_PATH, async (_request, reply) => {
    securityHeaders(reply);
    const html = await readFile(path.join(uiDir, 'index.html'));
    return reply.type(CONTENT_TYPES['.html']!).send(html);
  });

  app.get(`${CONSOLE_ASSETS_PATH}*`, async (request, reply) => {
    securityHeaders(reply);
    const name = (request.params as { '*': string })['*'];
    const file = files.get(name);
    if (file === undefined) {
      notFoundHandler(request, reply);
      return reply;
    }
    // Read on each request: a page edited under the dev stack is served without a restart.
    let body: Buffer;
    try {
      body = await readFile(file);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      notFoundHandler(request, reply);
      return reply;
    }
    return reply.type(CONTENT_TYPES[path.extname(file)]!).send(body);
  });
};

// Like fastify-plugin: the hooks above apply to the scope that registers us (the app, so its 404s
// and 400s too), not to a scope of our own.
Object.assign(consoleAssetsRoutes, { [Symbol.for('skip-override')]: true });
