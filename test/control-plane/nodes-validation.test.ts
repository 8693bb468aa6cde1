/**
 * The Add Node wizard's rules (seed 004 §9.2/§9.3) through POST /api/v1/nodes: every rejection is a
 * 400 ZN_ERR_CP_INVALID_REQUEST whose message names the field and the rule, and nothing is stored.
 */
import t from 'tap';
import type { Test } from 'tap';
import { createTestCa } from '../fixtures/tls.js';
import { testDatabase } from '../fixtures/postgres.js';
import { bearer, migratedPool, nodesApp, uniqueName, validNodeBody } from './nodes-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const { app } = await nodesApp(t, db.url);
const ca = await createTestCa();

async function rejected(tt: Test, overrides: Record<string, unknown>, expected: string, what: string): Promise<void> {
  const body = validNodeBody(overrides);
  const res = await app.inject({ method: 'POST', url: '/api/v1/nodes', headers: bearer, payload: body });
  tt.equal(res.statusCode, 400, `${what}: 400`);
  // `?.`: an accepted body has no error, and the checks below should say so rather than throw.
  const error = res.json<{ error?: { code: string; message: string } }>().error;
  tt.equal(error?.code, 'ZN_ERR_CP_INVALID_REQUEST', `${what}: code`);
  tt.ok(error?.message.includes(expected), `${what}: message "${error?.message}" contains "${expected}"`);
  if (typeof body.name === 'string') {
    const { rowCount } = await pool.query('select 1 from nodes where name = $1', [body.name]);
    tt.equal(rowCount, 0, `${what}: nothing stored`);
  }
}

async function accepted(tt: Test, overrides: Record<string, unknown>, what: string): Promise<Record<string, unknown>> {
  const res = await app.inject({ method: 'POST', url: '/api/v1/nodes', headers: bearer, payload: validNodeBody(overrides) });
  tt.equal(res.statusCode, 201, res.statusCode === 201 ? what : `${what}: ${res.body}`);
  return res.json<{ node: Record<string, unknown> }>().node;
}

t.test('name: lowercase letters, digits and hyphens, 2 to 31 characters, required', async (t) => {
  const rule = 'name: must be 2 to 31 characters of lowercase letters, digits and hyphens';
  await rejected(t, { name: 'a' }, rule, 'one character');
  await rejected(t, { name: 'a'.repeat(32) }, rule, '32 characters');
  await rejected(t, { name: 'Edge-1' }, rule, 'upper case');
  await rejected(t, { name: 'edge_1' }, rule, 'underscore');
  await rejected(t, { name: 'edge 1' }, rule, 'space');
  await rejected(t, { name: 'édge' }, rule, 'non-ASCII letter');
  await rejected(t, { name: undefined }, 'name: is required', 'missing');
  await rejected(t, { name: 12 }, 'name: must be a string', 'a number');
  await rejected(t, { name: '-ab' }, 'name: must begin and end with a letter or digit', 'a leading hyphen (read as an option by the CLI)');
  await rejected(t, { name: 'ab-' }, 'name: must begin and end with a letter or digit', 'a trailing hyphen');
  await accepted(t, { name: uniqueName('a') }, 'hyphens inside');
  await accepted(t, { name: `ab` }, 'two characters');
  await accepted(t, { name: `x${uniqueName()}`.padEnd(31, '9') }, 'thirty-one characters');
});

t.test('installDir: every rule of §9.2 is its own message', async (t) => {
  const cases: Array<[string, string]> = [
    ['opt/zenova-node', 'installDir: must be an absolute path'],
    ['/data/zenova node', "installDir: may contain only letters, digits, '.', '_', '-' and '/'"],
    ['/data/zenova$node', "installDir: may contain only letters, digits"],
    ['/data/节点', "installDir: may contain only letters, digits"],
    ['/data//zenova', "installDir: must not contain empty path segments"],
    ['/data/../etc/zenova', "installDir: must not contain '.' or '..' segments"],
    ['/data/./zenova', "installDir: must not contain '.' or '..' segments"],
    ['/data', 'installDir: must be at least two levels deep'],
    ['/', 'installDir: must be at least two levels deep'],
    ['/opt/zenova', 'installDir: must not be inside or overlap the central install /opt/zenova'],
    ['/opt/zenova/node', 'installDir: must not be inside or overlap the central install /opt/zenova'],
    ['/tmp/zenova', 'installDir: must not be under /tmp'],
    ['/var/tmp/zenova', 'installDir: must not be under /var/tmp'],
    ['/home/ops/zenova', 'installDir: must not be under /home'],
    ['/home/ops', 'installDir: must not be under /home'],
    ['/root/zenova', 'installDir: must not be under /root'],
    ['/run/user/1000', 'installDir: must not be under /run/user'],
    ['/usr/local/zenova', 'installDir: must not be under /usr'],
    ['/etc/zenova', 'installDir: must not be under /etc'],
    ['/boot/zenova', 'installDir: must not be under /boot'],
    [`/data/${'d'.repeat(260)}`, 'installDir: must be at most 255 characters'],
  ];
  for (const [dir, message] of cases) await rejected(t, { installDir: dir }, message, dir.slice(0, 40));
});

t.test('installDir: allowed places are stored without a trailing slash; blank means the default', async (t) => {
  t.equal((await accepted(t, { installDir: '/data/zenova-node/' }, 'data volume')).installDir, '/data/zenova-node');
  t.equal((await accepted(t, { installDir: '/opt/zenova-node' }, 'the default dir, spelt out')).installDir, '/opt/zenova-node');
  t.equal((await accepted(t, { installDir: '/opt/zenovas/n_1.x' }, 'a sibling of /opt/zenova')).installDir, '/opt/zenovas/n_1.x');
  t.equal((await accepted(t, { installDir: '/runner/zenova' }, '/runner is not /run')).installDir, '/runner/zenova');
  t.equal((await accepted(t, { installDir: '/srv/tmp' }, 'a dir named tmp elsewhere')).installDir, '/srv/tmp');
  t.equal((await accepted(t, { installDir: '' }, 'blank')).installDir, null);
  t.equal((await accepted(t, {}, 'absent')).installDir, null);
});

t.test('controlPlaneUrl: must start with https:// and be a plain, shell-safe URL', async (t) => {
  const cases: Array<[unknown, string]> = [
    ['http://cp.example.com', 'controlPlaneUrl: must start with https://'],
    ['cp.example.com', 'controlPlaneUrl: must start with https://'],
    ['HTTPS://cp.example.com', 'controlPlaneUrl: must start with https://'],
    ['https://', 'controlPlaneUrl: must be a valid URL'],
    ['https://ops:pw@cp.example.com', 'controlPlaneUrl: must not contain a user name or password'],
    ['https://cp.example.com/?a=1', 'controlPlaneUrl: must not contain a query or fragment'],
    ['https://cp.example.com/#x', 'controlPlaneUrl: must not contain a query or fragment'],
    ['https://cp.example.com/$(reboot)', 'controlPlaneUrl: may contain only letters, digits'],
    [`https://cp.example.com/${'p'.repeat(2050)}`, 'controlPlaneUrl: must be at most 2048 characters'],
    [undefined, 'controlPlaneUrl: is required'],
    // The console page's address pasted for the callback URL: every install command would fail.
    ['https://cp.example.com:7400/console/', "controlPlaneUrl: is the console page's address (ends in /console)"],
    ['https://cp.example.com/zenova/Console', "controlPlaneUrl: is the console page's address (ends in /console)"],
    // Spelt so the text does not end in /console, but the path nodes request does.
    ['https://cp.example.com/console/.', "controlPlaneUrl: is the console page's address (ends in /console)"],
    ['https://cp.example.com/console/x/..', "controlPlaneUrl: is the console page's address (ends in /console)"],
    ['https://cp.example.com/%63onsole', "controlPlaneUrl: is the console page's address (ends in /console)"],
    ['https://cp.example.com/zenova/%43%4fnsole/', "controlPlaneUrl: is the console page's address (ends in /console)"],
    // Nodes resolve dot segments away: the install command and node list would show another path than the one called.
    ['https://cp.example.com/zenova/../api', "controlPlaneUrl: must not contain the path segment '..' (the URL parser resolves it away"],
    ['https://cp.example.com/./zenova', "controlPlaneUrl: must not contain the path segment '.' (the URL parser resolves it away"],
    ['https://cp.example.com/zenova/%2E%2e/api', "controlPlaneUrl: must not contain the path segment '%2E%2e' (read as '..'; the URL parser"],
  ];
  for (const [url, message] of cases) await rejected(t, { controlPlaneUrl: url }, message, String(url).slice(0, 60));
  t.equal((await accepted(t, { controlPlaneUrl: 'https://cp.example.com/consoles' }, 'a path that only starts like console')).controlPlaneUrl, 'https://cp.example.com/consoles');
  t.equal((await accepted(t, { controlPlaneUrl: 'https://cp.example.com/console%2F' }, 'an escaped slash is part of the name')).controlPlaneUrl, 'https://cp.example.com/console%2F');
  t.equal((await accepted(t, { controlPlaneUrl: 'https://cp.example.com:7443/zenova/' }, 'port and path')).controlPlaneUrl,
    'https://cp.example.com:7443/zenova', 'a trailing slash is dropped');
  t.equal((await accepted(t, { controlPlaneUrl: 'https://10.0.0.5' }, 'an IP')).controlPlaneUrl, 'https://10.0.0.5');
});

t.test('controlPlaneUrl: the host is written as nodes will read it, with no @ before it', async (t) => {
  const host = 'controlPlaneUrl: must write the host as it is read';
  const cases: Array<[string, string]> = [
    ['https://0x7f.1', host], // 127.0.0.1
    ['https://1.2.3', host], // 1.2.0.3
    ['https://2130706433', host], // 127.0.0.1
    ['https://010.0.0.1', host], // octal: 8.0.0.1
    ['https://cp%2eexample.com', host],
    ['https://@cp.example.com', "controlPlaneUrl: must not contain '@' before the host"],
  ];
  for (const [url, message] of cases) await rejected(t, { controlPlaneUrl: url }, message, url);
  for (const url of ['https://localhost:8443', 'https://10.0.0.1', 'https://[::1]:8443', 'https://[2001:db8::1]', 'https://CP.Example.com']) {
    t.equal((await accepted(t, { controlPlaneUrl: url }, url)).controlPlaneUrl, url, `${url} is stored as written`);
  }
});

t.test('caPem: optional, and when given it must be PEM certificates that parse as X.509', async (t) => {
  const body = ca.certPem.split('\n').filter((l) => !l.startsWith('-----')).join('\n');
  const cases: Array<[unknown, string]> = [
    ['not a certificate', 'caPem: must be one or more PEM certificates'],
    [`-----BEGIN CERTIFICATE-----\n${Buffer.from('garbage that is not DER').toString('base64')}\n-----END CERTIFICATE-----\n`,
      'caPem: must parse as an X.509 certificate'],
    [`${ca.certPem}-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n`, 'caPem: must parse as an X.509 certificate (certificate 2)'],
    [`notes before\n${ca.certPem}`, 'caPem: must contain only PEM certificates'],
    [`-----BEGIN PRIVATE KEY-----\n${body}\n-----END PRIVATE KEY-----\n`, 'caPem: must be one or more PEM certificates'],
    [`${ca.certPem}\n`.repeat(17), 'caPem: must hold at most 16 certificates'],
    ['x'.repeat(70 * 1024), 'caPem: must be at most 65536 characters'],
    [42, 'caPem: must be a string'],
  ];
  for (const [pem, message] of cases) await rejected(t, { caPem: pem }, message, message);
  const withCa = await accepted(t, { caPem: ca.certPem }, 'a real CA');
  t.equal(withCa.hasCa, true);
  const crlf = await accepted(t, { caPem: ca.certPem.replace(/\n/g, '\r\n') }, 'CRLF line ends');
  t.equal(crlf.hasCa, true);
  t.equal((await accepted(t, { caPem: '  ' }, 'blank')).hasCa, false);
});

t.test('surfaces: the model gateway is mandatory, tools optional, nothing else', async (t) => {
  await rejected(t, { surfaces: ['tools'] }, "surfaces: must include 'model' (the model gateway is mandatory)", 'tools only');
  await rejected(t, { surfaces: [] }, "surfaces: must include 'model'", 'empty');
  await rejected(t, { surfaces: ['model', 'chat'] }, 'surfaces[1]: must be one of model, tools', 'unknown surface');
  await rejected(t, { surfaces: ['model', 'model'] }, 'surfaces: must not list a surface twice', 'twice');
  await rejected(t, { surfaces: 'model' }, 'surfaces: must be an array', 'a string');
  await rejected(t, { surfaces: undefined }, 'surfaces: is required', 'missing');
  t.same((await accepted(t, { surfaces: ['tools', 'model'] }, 'both')).surfaces, ['model', 'tools'], 'stored in canonical order');
});

t.test('address: a DNS name or IP, optionally with a port', async (t) => {
  const rule = 'address: must be a DNS name or IP address, optionally with :port';
  for (const bad of ['edge example.com', 'https://edge.example.com', 'edge.example.com:0', 'edge.example.com:70000',
    '-edge.example.com', 'edge.example.com/path', '[::1', 'a:b:c',
    // Mistyped IPv4 addresses: an all-digit last label is no host name either.
    '10.0.0.256', '999.999.999.999', '10.0.0', '10.0.0.1.5:8443']) {
    await rejected(t, { address: bad }, rule, bad);
  }
  await rejected(t, { address: undefined }, 'address: is required', 'missing');
  for (const good of ['edge.example.com', 'EDGE.example.com:8443', '10.1.2.3', '10.1.2.3:443', '::1', '[fd00::5]:443', 'localhost', '1edge.example.com', 'edge-01.example.com', 'node.123abc']) {
    await accepted(t, { address: good }, good);
  }
});

t.test('region, spool quota, spool-full policy and replicas have their ranges and defaults', async (t) => {
  await rejected(t, { region: 'x'.repeat(65) }, 'region: must be at most 64 characters', 'long region');
  await rejected(t, { region: 'east<script>' }, 'region: must be at most 64 characters of letters, digits', 'markup in region');
  await rejected(t, { spoolQuotaGb: 0 }, 'spoolQuotaGb: must be an integer from 1 to 10000', 'quota 0');
  await rejected(t, { spoolQuotaGb: 10001 }, 'spoolQuotaGb: must be an integer from 1 to 10000', 'quota too big');
  await rejected(t, { spoolQuotaGb: 2.5 }, 'spoolQuotaGb: must be an integer from 1 to 10000', 'fractional quota');
  await rejected(t, { spoolQuotaGb: '10' }, 'spoolQuotaGb: must be an integer from 1 to 10000', 'quota as text');
  await rejected(t, { spoolFullPolicy: 'drop' }, 'spoolFullPolicy: must be one of reject, metering-only', 'unknown policy');
  await rejected(t, { replicas: 0 }, 'replicas: must be an integer from 1 to 16', 'no replicas');
  await rejected(t, { replicas: 17 }, 'replicas: must be an integer from 1 to 16', '17 replicas');
  const defaults = await accepted(t, {}, 'defaults');
  t.match(defaults, { region: null, spoolQuotaGb: 10, spoolFullPolicy: 'reject', replicas: 1 });
  const set = await accepted(t, { region: '华东 (Shanghai)', spoolQuotaGb: 10000, spoolFullPolicy: 'metering-only', replicas: 16 }, 'set');
  t.match(set, { region: '华东 (Shanghai)', spoolQuotaGb: 10000, spoolFullPolicy: 'metering-only', replicas: 16 });
});

t.test('region: letters of any script, combining marks included, stored in NFC and counted in code points', async (t) => {
  const rule = 'region: must be at most 64 characters of letters, digits, spaces and . _ ( ) / -';
  /** The region a new node was stored with, or the refusal's message. */
  const stored = async (region: string): Promise<unknown> => {
    const res = await app.inject({ method: 'POST', url: '/api/v1/nodes', headers: bearer, payload: validNodeBody({ region }) });
    return res.statusCode === 201 ? res.json<{ node: { region: unknown } }>().node.region : `${res.statusCode} ${res.body}`;
  };
  for (const region of ['กรุงเทพ', 'दिल्ली', 'मुंबई (पश्चिम)', 'São Paulo', '华东 一区', 'Ελλάδα/Αθήνα']) {
    t.equal(await stored(region), region, `${region} is stored as written`);
  }
  t.equal(await stored(' Sa\u0303o Paulo '), 'São Paulo', 'decomposed input is stored composed (NFC)');
  // 64 letters each written with a combining mark are 64 characters once composed.
  t.equal(await stored('e\u0301'.repeat(64)), '\u00e9'.repeat(64), '64 decomposed é');
  // A letter outside the BMP is one character, not two UTF-16 units.
  t.equal(await stored('\u{20000}'.repeat(64)), '\u{20000}'.repeat(64), '64 astral ideographs');
  // Marks that do not compose count one each.
  await rejected(t, { region: `${'दि'.repeat(32)}a` }, rule, '65 code points of letters and marks');
  await rejected(t, { region: '\u0301east' }, rule, 'a mark with no letter before it');
  await rejected(t, { region: 'east \u0338/' }, rule, 'a mark on a space');
  await rejected(t, { region: 'east/\u20e0' }, rule, 'a mark on punctuation');
});

t.test('unknown fields and non-object bodies are refused, naming the field', async (t) => {
  await rejected(t, { status: 'online' }, 'status: unknown field', 'unknown field');
  for (const payload of ['[]', '"text"', '42']) {
    const res = await app.inject({
      method: 'POST', url: '/api/v1/nodes', headers: { ...bearer, 'content-type': 'application/json' }, payload,
    });
    t.equal(res.statusCode, 400, payload);
    t.match(res.json(), { error: { code: 'ZN_ERR_CP_INVALID_REQUEST', message: 'body: must be a JSON object' } }, payload);
  }
});

t.test('several problems are reported together, each as field: rule', async (t) => {
  const res = await app.inject({
    method: 'POST', url: '/api/v1/nodes', headers: bearer,
    payload: { name: 'X', surfaces: ['tools'], address: 'edge.example.com', controlPlaneUrl: 'http://cp', installDir: '/tmp/z' },
  });
  t.equal(res.statusCode, 400);
  const message = res.json<{ error: { message: string } }>().error.message;
  for (const part of ['name: ', "surfaces: must include 'model'", 'installDir: must not be under /tmp', 'controlPlaneUrl: must start with https://']) {
    t.ok(message.includes(part), `"${message}" has "${part}"`);
  }
});

t.test('an oversized body is refused before validation', async (t) => {
  const res = await app.inject({
    method: 'POST', url: '/api/v1/nodes', headers: bearer,
    payload: validNodeBody({ caPem: 'x'.repeat(200 * 1024) }),
  });
  t.equal(res.statusCode, 413);
  t.equal(res.json<{ error: { code: string } }>().error.code, 'ZN_ERR_CP_BODY_TOO_LARGE');
});
