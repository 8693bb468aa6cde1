/**
 * The console's static files: the page and its assets with their content types and security
 * headers (CSP, nosniff, no referrer), the redirects to /console/, and the allow-list: nothing
 * outside it (other extensions, dot files, deeper folders, symlinks, `..` in any spelling) is served.
 */
import { mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import Fastify from 'fastify';
import t from 'tap';
import type { Test } from 'tap';
import { CONSOLE_CSP, DEFAULT_CONSOLE_UI_DIR, consoleAssetsRoutes } from '../../control-plane/src/console/console-assets.routes.js';
import { notFoundHandler } from '../../control-plane/src/http/error-handler.js';
import { startConsoleStack } from './browser-harness.js';

const stack = await startConsoleStack(t);

function checkSecurityHeaders(t: Test, headers: Record<string, unknown>, what: string): void {
  t.equal(headers['content-security-policy'], CONSOLE_CSP, `${what}: CSP`);
  t.equal(headers['x-content-type-options'], 'nosniff', `${what}: nosniff`);
  t.equal(headers['referrer-policy'], 'no-referrer', `${what}: referrer-policy`);
}

/** A GET sent with its path byte for byte: no client-side `..` normalization. */
async function rawGet(pathname: string): Promise<{ status: number; body: string; headers: http.IncomingHttpHeaders }> {
  const url = new URL(stack.baseUrl);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: url.hostname, port: url.port, path: pathname, method: 'GET' }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8'), headers: res.headers }));
    });
    req.on('error', reject);
    req.end();
  });
}

t.test('the CSP allows only this origin, no inline script or style, and no framing', async (t) => {
  const directives = new Map(CONSOLE_CSP.split(';').map((d) => d.trim().split(/\s+/)).map(([name, ...values]) => [name!, values]));
  t.same(directives.get('default-src'), ["'self'"]);
  t.same(directives.get('script-src'), ["'self'"]);
  t.same(directives.get('style-src'), ["'self'"]);
  t.same(directives.get('frame-ancestors'), ["'none'"]);
  t.notOk(CONSOLE_CSP.includes('unsafe-'), 'no unsafe-inline or unsafe-eval');
});

t.test('/console/ answers the page as HTML with the security headers, loading app.js and console.css', async (t) => {
  const res = await stack.app.inject({ method: 'GET', url: '/console/' });
  t.equal(res.statusCode, 200);
  t.equal(res.headers['content-type'], 'text/html; charset=utf-8');
  checkSecurityHeaders(t, res.headers, '/console/');
  t.match(res.body, /<script type="module" src="\/console\/assets\/app\.js"><\/script>/);
  t.match(res.body, /<link rel="stylesheet" href="\/console\/assets\/console\.css">/);
  t.notMatch(res.body, /<script>|<style|style=/, 'nothing inline for the CSP to block');
});

t.test('every console file is served with its content type and the security headers', async (t) => {
  const pages = readdirSync(path.join(DEFAULT_CONSOLE_UI_DIR, 'pages')).filter((f) => f.endsWith('.js')).map((f) => `pages/${f}`);
  const expected: Array<[string, string]> = [
    ['app.js', 'text/javascript; charset=utf-8'],
    ['api.js', 'text/javascript; charset=utf-8'],
    ['dom.js', 'text/javascript; charset=utf-8'],
    ['console.css', 'text/css; charset=utf-8'],
    ...pages.map((p): [string, string] => [p, 'text/javascript; charset=utf-8']),
  ];
  for (const [name, type] of expected) {
    const res = await rawGet(`/console/assets/${name}`);
    t.equal(res.status, 200, name);
    t.equal(res.headers['content-type'], type, `${name}: content type`);
    checkSecurityHeaders(t, res.headers, name);
  }
});

t.test('unknown assets and any path with .. are 404 with the API\'s error body', async (t) => {
  const paths = [
    '/console/assets/nope.js',
    '/console/assets/index.html',
    '/console/assets/',
    '/console/assets/pages/',
    '/console/assets/../console-sessions.ts',
    '/console/assets/..%2fconsole-sessions.ts',
    '/console/assets/%2e%2e/console-sessions.ts',
    '/console/assets/pages/../app.js',
    '/console/assets/pages/..%2f..%2fconsole-assets.routes.ts',
    '/console/assets/app.js/',
    '/console/assets//app.js',
    '/console/assets/APP.JS',
  ];
  for (const p of paths) {
    const res = await rawGet(p);
    if (res.status === 302 || res.status === 301) {
      t.fail(`${p} was redirected to ${String(res.headers.location)}`);
      continue;
    }
    t.equal(res.status, 404, p);
    const body = JSON.parse(res.body) as { error: { code: string } };
    t.equal(body.error.code, 'ZN_ERR_CP_NOT_FOUND', `${p}: the API's error body`);
    t.notMatch(res.body, /import |export |createHash/, `${p}: no source served`);
  }
});

t.test('every other /console answer, the app\'s own 404s and 400s too, carries the security headers', async (t) => {
  const paths = ['/console/nope', '/console/index.html', '/console//', '/console/assets/%2e%2e/x', '/console/assets/nope.js', '/console?x=1'];
  for (const p of paths) {
    const res = await rawGet(p);
    t.ok(res.status >= 300 && res.status < 500, `${p}: not served (${res.status})`);
    checkSecurityHeaders(t, res.headers, p);
    t.equal(res.headers['x-frame-options'], 'DENY', `${p}: x-frame-options`);
  }
  const other = await rawGet('/nope');
  t.equal(other.status, 404);
  t.equal(other.headers['content-security-policy'], undefined, 'a 404 outside /console is not given the console\'s CSP');
});

t.test('the router\'s 400 for a bad %-escape under /console carries the security headers', async (t) => {
  const res = await rawGet('/console/assets/%');
  t.equal(res.status, 400);
  checkSecurityHeaders(t, res.headers, '/console/assets/%');
  t.equal(res.headers['x-frame-options'], 'DENY', 'x-frame-options');
});

t.test('/ and /console redirect to /console/', async (t) => {
  for (const url of ['/', '/console']) {
    const res = await stack.app.inject({ method: 'GET', url });
    t.equal(res.statusCode, 302, url);
    t.equal(res.headers.location, '/console/', url);
  }
});

t.test('only *.js, *.css and pages/*.js of the ui folder are served: no other files, dot files, deeper folders or symlinks', async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'zenova-console-ui-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const outside = mkdtempSync(path.join(os.tmpdir(), 'zenova-console-outside-'));
  t.teardown(() => rmSync(outside, { recursive: true, force: true }));
  writeFileSync(path.join(outside, 'secret.js'), 'export const secret = 1;\n');
  mkdirSync(path.join(dir, 'pages', 'deeper'), { recursive: true });
  mkdirSync(path.join(dir, 'other'));
  writeFileSync(path.join(dir, 'index.html'), '<!doctype html><title>t</title>');
  writeFileSync(path.join(dir, 'ok.js'), 'export {};\n');
  writeFileSync(path.join(dir, 'ok.css'), 'body {}\n');
  writeFileSync(path.join(dir, 'pages', 'page.js'), 'export {};\n');
  writeFileSync(path.join(dir, 'gone.js'), 'export {};\n');
  for (const f of ['notes.txt', '.hidden.js', 'ok.js.map', 'other/x.js', 'pages/deeper/y.js', 'pages/style.css']) writeFileSync(path.join(dir, f), 'x');
  symlinkSync(path.join(outside, 'secret.js'), path.join(dir, 'pages', 'link.js'));
  symlinkSync(path.join(outside, 'secret.js'), path.join(dir, 'link.js'));

  const app = Fastify();
  app.setNotFoundHandler(notFoundHandler);
  await app.register(consoleAssetsRoutes, { uiDir: dir });
  t.teardown(() => app.close());
  rmSync(path.join(dir, 'gone.js'));

  for (const name of ['ok.js', 'ok.css', 'pages/page.js']) {
    t.equal((await app.inject({ method: 'GET', url: `/console/assets/${name}` })).statusCode, 200, `${name} is served`);
  }
  const refused = ['notes.txt', '.hidden.js', 'ok.js.map', 'other/x.js', 'pages/deeper/y.js', 'pages/style.css', 'pages/link.js', 'link.js', 'gone.js', 'index.html'];
  for (const name of refused) {
    const res = await app.inject({ method: 'GET', url: `/console/assets/${name}` });
    t.equal(res.statusCode, 404, `${name} is not served`);
  }
  t.equal((await app.inject({ method: 'GET', url: '/console/' })).headers['content-type'], 'text/html; charset=utf-8');
});
