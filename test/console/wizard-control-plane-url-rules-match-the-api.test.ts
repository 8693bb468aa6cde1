// The Add node wizard judges the control-plane URL in the browser before the API does (add-node.js
// keeps its own copy of the rules: the console's files are plain JavaScript, served as they are).
// Every URL is judged as the API judges it, in the API's words, so the wizard never reaches its
// last step with a URL the create call would only then refuse.
import t from 'tap';
import { controlPlaneUrlProblem as apiControlPlaneUrlProblem } from '../../control-plane/src/nodes/node-validation.js';
// @ts-expect-error: plain JavaScript module of the console, no types
import { controlPlaneUrlProblem as wizardControlPlaneUrlProblem } from '../../control-plane/src/console/ui/pages/add-node.js';

const wizard = wizardControlPlaneUrlProblem as (value: string) => string | undefined;

const HOSTS = [
  'cp.example.com', 'CP.Example.COM', 'cp.example.com:8443', '10.0.0.5', '10.0.0.5:443', '[::1]', '[::1]:8443', '[2001:DB8::1]',
  'xn--bcher-kva.example', '0x7f.0.0.1', '127.1', '1.2.3', '010.0.0.1', '%63p.example.com', 'cp%2eexample.com', 'cp.example.com:0',
];
const PATHS = [
  '', '/', '/zenova', '/zenova/', '/console', '/console/', '/Console//', '/console/.', '/%63onsole', '/a/console', '/console/x',
  '/a/../b', '/a/%2e%2E/b', '/./x', '/a/.', '/a/%2E', '/a..b', '/...', '/.hidden', '/a/..', '/a%2fb', '/~user',
];

t.test('every host and path the API judges, the wizard judges alike, in the API\'s words', async (t) => {
  let refused = 0;
  for (const host of HOSTS) {
    for (const path of PATHS) {
      const url = `https://${host}${path}`;
      const api = apiControlPlaneUrlProblem(url);
      if (api !== undefined) refused += 1;
      t.equal(wizard(url), api, `${url}: ${api ?? 'accepted'}`);
    }
  }
  // The list must hold both kinds, or it proves nothing.
  t.ok(refused > 0 && refused < HOSTS.length * PATHS.length, `the list holds URLs both refused (${refused}) and accepted`);
});

t.test('the rules the wizard once lacked: the console page, dot segments and hosts the parser rewrites', async (t) => {
  for (const url of [
    'https://cp.example.com/console', 'https://cp.example.com/%63onsole/', 'https://cp.example.com/a/../b',
    'https://cp.example.com/v1/%2e', 'https://0x7f.0.0.1', 'https://127.1:8443', 'https://%63p.example.com',
  ]) {
    const api = apiControlPlaneUrlProblem(url);
    t.ok(api !== undefined, `${url}: the API refuses it`);
    t.equal(wizard(url), api, `${url}: so does the wizard, in the same words`);
  }
});

t.test('other forms: both refuse, whatever the order of their rules', async (t) => {
  for (const url of [
    'http://cp.example.com', 'https://cp.example.com?x=1', 'https://cp.example.com/#a', 'https://user@cp.example.com',
    'https://@cp.example.com', 'https:///cp.example.com', 'https://cp.example.com\\x', 'https://cp.example.com/ a',
    'https://bücher.example', 'https://ｃｐ.example.com', 'https://cp\u00ad.example.com', 'https://cp.example.com/ä', '',
  ]) {
    t.ok(apiControlPlaneUrlProblem(url) !== undefined, `${JSON.stringify(url)}: the API refuses it`);
    t.ok(wizard(url) !== undefined, `${JSON.stringify(url)}: so does the wizard`);
  }
});
