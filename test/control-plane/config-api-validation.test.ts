/**
 * Every rejection by the config admin API names its field and rule (`targets[0].upstream: …`),
 * references to missing things are 400s naming the field, so is a route mixing the OpenAI-compatible and
 * Anthropic API families, things in use cannot be deleted (409),
 * names are unique among live things (409), and money is integers only.
 */
import t from 'tap';
import { testDatabase } from '../fixtures/postgres.js';
import { configApp, expectStatus, uniqueConfigName } from './config-harness.js';
import { migratedPool, validNodeBody } from './nodes-harness.js';

const db = await testDatabase(t);
await migratedPool(t, db.url);
const { call, version } = await configApp(t, db.url);

interface ErrorReply { error: { code: string; message: string; type: string } }

const account = uniqueConfigName('acct');
const upstream = uniqueConfigName('up');
const node = validNodeBody().name as string;
expectStatus(await call('POST', '/api/v1/accounts', { name: account }), 201);
expectStatus(await call('POST', '/api/v1/upstreams', { name: upstream, kind: 'openai-compatible', baseUrl: 'http://127.0.0.1:9/v1' }), 201);
expectStatus(await call('POST', '/api/v1/nodes', validNodeBody({ name: node })), 201);

const route = (overrides: Record<string, unknown> = {}): Record<string, unknown> =>
  ({ alias: uniqueConfigName('alias'), targets: [{ upstream, model: 'm' }], ...overrides });

type Case = [what: string, method: 'POST' | 'PUT' | 'PATCH', url: string, body: unknown, message: RegExp];

const cases: Case[] = [
  // accounts
  ['an account without a name', 'POST', '/api/v1/accounts', {}, /^name: is required$/],
  ['an account name with a space', 'POST', '/api/v1/accounts', { name: 'a b' }, /^name: must be 1 to 128 characters/],
  ['an account name of 129 characters', 'POST', '/api/v1/accounts', { name: 'a'.repeat(129) }, /^name: must be 1 to 128/],
  ['an account status not in the list', 'POST', '/api/v1/accounts', { name: 'ok', status: 'closed' }, /^status: must be one of active, suspended$/],
  ['an unknown account field', 'POST', '/api/v1/accounts', { name: 'ok', tenant: 'x' }, /^tenant: unknown field$/],
  ['a body that is not an object', 'POST', '/api/v1/accounts', [1], /^body: must be a JSON object$/],
  ['an empty account patch', 'PATCH', `/api/v1/accounts/${account}`, {}, /^body: must change at least one of status, rateLimitPolicy$/],
  ['an unknown rate-limit policy on an account', 'POST', '/api/v1/accounts', { name: uniqueConfigName('a'), rateLimitPolicy: 'nope' },
    /^rateLimitPolicy: no rate-limit policy named 'nope'$/],
  // API keys
  ['a key without an account', 'POST', '/api/v1/api-keys', { name: 'k' }, /^account: is required$/],
  ['a key for an unknown account', 'POST', '/api/v1/api-keys', { account: 'nope', name: 'k' }, /^account: no account named 'nope'$/],
  ['allowedModels that is not an array', 'POST', '/api/v1/api-keys', { account, name: 'k', allowedModels: 'gpt-4o' }, /^allowedModels: must be an array/],
  ['allowedModels with a bad alias', 'POST', '/api/v1/api-keys', { account, name: 'k', allowedModels: ['ok', 'bad alias'] }, /^allowedModels\[1\]: must be 1 to 128/],
  ['allowedModels with a repeat', 'POST', '/api/v1/api-keys', { account, name: 'k', allowedModels: ['a', 'a'] }, /^allowedModels: must not list an alias twice$/],
  ['allowedToolServers that is not an array', 'POST', '/api/v1/api-keys', { account, name: 'k', allowedToolServers: 'crm' },
    /^allowedToolServers: must be an array of tool server names, or null for all$/],
  // A model alias's characters are not a tool server name's: the list is held to the tool servers' own rule.
  ['allowedToolServers with a name tool servers cannot have', 'POST', '/api/v1/api-keys', { account, name: 'k', allowedToolServers: ['crm', 'Team/CRM'] },
    /^allowedToolServers\[1\]: must be 1 to 63 lower-case letters, digits and -/],
  ['allowedToolServers with a repeat', 'POST', '/api/v1/api-keys', { account, name: 'k', allowedToolServers: ['crm', 'crm'] },
    /^allowedToolServers: must not list a tool server twice$/],
  ['allowedToolServers past 1000', 'POST', '/api/v1/api-keys', { account, name: 'k', allowedToolServers: Array.from({ length: 1001 }, (_, i) => `ts-${i}`) },
    /^allowedToolServers: must list at most 1000 tool servers$/],
  ['expiresAt that is not a date-time', 'POST', '/api/v1/api-keys', { account, name: 'k', expiresAt: 'tomorrow' }, /^expiresAt: must be an ISO 8601 date-time/],
  ['expiresAt in the past', 'POST', '/api/v1/api-keys', { account, name: 'k', expiresAt: '2001-01-01T00:00:00Z' }, /^expiresAt: must be in the future$/],
  ['expiresAt finer than a millisecond (it would be cut)', 'POST', '/api/v1/api-keys', { account, name: 'k', expiresAt: '2099-01-01T00:00:00.1234Z' }, /^expiresAt: must have at most 3 fractional digits/],
  ['an unknown guardrail policy on a key', 'POST', '/api/v1/api-keys', { account, name: 'k', guardrailPolicy: 'nope' }, /^guardrailPolicy: no guardrail policy named 'nope'$/],
  ['an unknown rate-limit policy on a key', 'POST', '/api/v1/api-keys', { account, name: 'k', rateLimitPolicy: 'nope' }, /^rateLimitPolicy: no rate-limit policy named 'nope'$/],
  // upstreams
  ['an upstream kind not in the list', 'POST', '/api/v1/upstreams', { name: 'u', kind: 'grpc', baseUrl: 'https://a.example' },
    /^kind: must be one of openai, anthropic, openai-compatible$/],
  ['a baseUrl that is not http(s)', 'POST', '/api/v1/upstreams', { name: 'u', kind: 'openai', baseUrl: 'ftp://a.example' }, /^baseUrl: must start with http:\/\/ or https:\/\/$/],
  ['a baseUrl with credentials', 'POST', '/api/v1/upstreams', { name: 'u', kind: 'openai', baseUrl: 'https://user:pw@a.example' }, /^baseUrl: must not contain a user name or password/],
  ['a baseUrl with a query', 'POST', '/api/v1/upstreams', { name: 'u', kind: 'openai', baseUrl: 'https://a.example/v1?key=1' }, /^baseUrl: must not contain a query or fragment$/],
  // The URL parser would read these as another URL than the one stored: https://v1/, https://a.example/v1.
  ['a baseUrl with no authority', 'POST', '/api/v1/upstreams', { name: 'u', kind: 'openai', baseUrl: 'https:///v1' }, /^baseUrl: must name a host right after the scheme/],
  ['a baseUrl with a backslash', 'POST', '/api/v1/upstreams', { name: 'u', kind: 'openai', baseUrl: 'https://a.example\\v1' }, /^baseUrl: must not contain a backslash/],
  ['a baseUrl on port 0', 'POST', '/api/v1/upstreams', { name: 'u', kind: 'openai', baseUrl: 'https://a.example:0/v1' }, /^baseUrl: must not use port 0/],
  ['an empty apiKey', 'POST', '/api/v1/upstreams', { name: 'u', kind: 'openai', baseUrl: 'https://a.example', apiKey: '  ' }, /^apiKey: must be 1 to 4096 printable/],
  ['an apiKey that is not a string', 'POST', '/api/v1/upstreams', { name: 'u', kind: 'openai', baseUrl: 'https://a.example', apiKey: 12 }, /^apiKey: must be a string$/],
  ['a timeout below 100 ms', 'POST', '/api/v1/upstreams', { name: 'u', kind: 'openai', baseUrl: 'https://a.example', timeoutMs: 5 }, /^timeoutMs: must be an integer from 100 to 600000$/],
  ['an empty upstream patch', 'PATCH', `/api/v1/upstreams/${upstream}`, {}, /^body: must change at least one of baseUrl, apiKey, timeoutMs$/],
  ['renaming an upstream', 'PATCH', `/api/v1/upstreams/${upstream}`, { name: 'x' }, /^name: unknown field/],
  // routes
  ['a route to an unknown upstream', 'POST', '/api/v1/routes', route({ targets: [{ upstream: 'nope', model: 'm' }] }), /^targets\[0\]\.upstream: no upstream named 'nope'$/],
  ['a route whose second fallback is unknown', 'POST', '/api/v1/routes',
    route({ fallbacks: [{ upstream, model: 'f' }, { upstream: 'gone', model: 'f' }] }), /^fallbacks\[1\]\.upstream: no upstream named 'gone'$/],
  ['a route without targets', 'POST', '/api/v1/routes', route({ targets: [] }), /^targets: must list at least one target$/],
  ['a route whose targets all weigh 0', 'POST', '/api/v1/routes', route({ targets: [{ upstream, model: 'm', weight: 0 }] }),
    /^targets: must have at least one target with a weight above 0$/],
  ['a fractional weight', 'POST', '/api/v1/routes', route({ targets: [{ upstream, model: 'm', weight: 1.5 }] }), /^targets\[0\]\.weight: must be an integer from 0 to 1000$/],
  ['a target without a model', 'POST', '/api/v1/routes', route({ targets: [{ upstream }] }), /^targets\[0\]\.model: is required$/],
  ['a target with an unknown field', 'POST', '/api/v1/routes', route({ targets: [{ upstream, model: 'm', region: 'x' }] }), /^targets\[0\]\.region: unknown field$/],
  ['six retries', 'POST', '/api/v1/routes', route({ retries: 6 }), /^retries: must be an integer from 0 to 5$/],
  ['an alias with a space', 'POST', '/api/v1/routes', route({ alias: 'gpt 4' }), /^alias: must be 1 to 128/],
  ['an alias in a replace body', 'PUT', '/api/v1/routes/anything', route(), /^alias: unknown field$/],
  // policies
  ['a rate-limit policy without limits', 'POST', '/api/v1/rate-limit-policies', { name: 'p' },
    /^body: must set at least one of requestsPerMinute, tokensPerMinute, concurrentRequests$/],
  ['a fractional requestsPerMinute', 'POST', '/api/v1/rate-limit-policies', { name: 'p', requestsPerMinute: 2.5 }, /^requestsPerMinute: must be an integer from 1 to 10000000$/],
  ['tokensPerMinute as a string', 'POST', '/api/v1/rate-limit-policies', { name: 'p', tokensPerMinute: '1000' }, /^tokensPerMinute: must be an integer from 1 to 10000000000$/],
  ['guardrail rules missing', 'POST', '/api/v1/guardrail-policies', { name: 'g' }, /^rules: is required$/],
  ['a guardrail detector not in the list', 'POST', '/api/v1/guardrail-policies', { name: 'g', rules: [{ detector: 'ssn', action: 'block', on: 'input' }] },
    /^rules\[0\]\.detector: must be one of regex, keywords/],
  ['a regex rule without a pattern', 'POST', '/api/v1/guardrail-policies', { name: 'g', rules: [{ detector: 'regex', action: 'block', on: 'input' }] },
    /^rules\[0\]\.pattern: is required for the regex detector$/],
  ['a regex rule whose pattern is only (?i)', 'POST', '/api/v1/guardrail-policies', { name: 'g', rules: [{ detector: 'regex', pattern: '(?i)', action: 'block', on: 'input' }] },
    /^rules\[0\]\.pattern: must not be empty$/],
  ['a regex that does not compile', 'POST', '/api/v1/guardrail-policies', { name: 'g', rules: [{ detector: 'regex', pattern: '(unclosed', action: 'block', on: 'input' }] },
    /^rules\[0\]\.pattern: must be a valid JavaScript regular expression/],
  ['keywords on an email rule', 'POST', '/api/v1/guardrail-policies', { name: 'g', rules: [{ detector: 'email', keywords: ['x'], action: 'mask', on: 'both' }] },
    /^rules\[0\]\.keywords: is only for the keywords detector$/],
  ['a rule without a direction', 'POST', '/api/v1/guardrail-policies', { name: 'g', rules: [{ detector: 'email', action: 'mask' }] },
    /^rules\[0\]\.on: must be one of input, output, both$/],
  // prices
  ['a float price', 'PUT', '/api/v1/prices/gpt-4o', { inputMicrosPerToken: 1.5, outputMicrosPerToken: 2 }, /^inputMicrosPerToken: must be an integer from 0 to 9007199254740991$/],
  ['a price as a string', 'PUT', '/api/v1/prices/gpt-4o', { inputMicrosPerToken: 1, outputMicrosPerToken: '2' }, /^outputMicrosPerToken: must be an integer from 0/],
  ['a negative request price', 'PUT', '/api/v1/prices/gpt-4o', { inputMicrosPerToken: 1, outputMicrosPerToken: 2, requestMicros: -1 }, /^requestMicros: must be an integer from 0/],
  ['a price above the safe integer range', 'PUT', '/api/v1/prices/gpt-4o', { inputMicrosPerToken: 2 ** 53, outputMicrosPerToken: 2 }, /^inputMicrosPerToken: must be an integer/],
  ['a price without outputMicrosPerToken', 'PUT', '/api/v1/prices/gpt-4o', { inputMicrosPerToken: 1 }, /^outputMicrosPerToken: must be an integer/],
  ['a price for a model alias with a space', 'PUT', '/api/v1/prices/gpt%204o', { inputMicrosPerToken: 1, outputMicrosPerToken: 2 }, /^model: must be 1 to 128/],
  // node settings
  ['node surfaces without model', 'PATCH', `/api/v1/nodes/${node}/settings`, { surfaces: ['tools'] }, /^surfaces: must include 'model'/],
  ['a node spool quota of 0', 'PATCH', `/api/v1/nodes/${node}/settings`, { spoolQuotaGb: 0 }, /^spoolQuotaGb: must be an integer from 1 to 10000$/],
  ['a node spool policy not in the list', 'PATCH', `/api/v1/nodes/${node}/settings`, { spoolFullPolicy: 'drop' }, /^spoolFullPolicy: must be one of reject, metering-only$/],
  ['an empty node settings patch', 'PATCH', `/api/v1/nodes/${node}/settings`, {}, /^body: must change at least one of surfaces, spoolQuotaGb, spoolFullPolicy$/],
  ['a node name in a settings patch', 'PATCH', `/api/v1/nodes/${node}/settings`, { name: 'x' }, /^name: unknown field/],
];

t.test('every rejected field is named with its rule', async (t) => {
  for (const [what, method, url, body, message] of cases) {
    const res = await call(method, url, body);
    const reply = res.json<ErrorReply>();
    t.equal(res.statusCode, 400, `${what}: 400`);
    t.equal(reply.error.code, 'ZN_ERR_CP_INVALID_REQUEST', `${what}: ZN_ERR_CP_INVALID_REQUEST`);
    t.match(reply.error.message, message, `${what}: ${reply.error.message}`);
  }
});

t.test('an upstream baseUrl must write its host as nodes will read it, with no @ before it; plain, IP and IDN hosts are kept as written', async (t) => {
  const host = /^baseUrl: must write the host as it is read \(an IPv4 address as four plain decimal numbers; a name without %-escapes, full-width or invisible characters\)$/;
  const at = /^baseUrl: must not contain '@' before the host \(it starts a user name\)$/;
  const refused: Array<[baseUrl: string, message: RegExp, readAs: string]> = [
    ['https://0x7f.1/v1', host, '127.0.0.1'],
    ['https://1.2.3/v1', host, '1.2.0.3'],
    ['https://127.1', host, '127.0.0.1'],
    ['https://10.0.0.01', host, '10.0.0.1'],
    ['https://api%2eopenai.com/v1', host, 'api.openai.com'],
    ['https://\uff41pi.openai.com', host, 'api.openai.com (a full-width a)'],
    ['https://api.open\u00adai.com', host, 'api.openai.com (a soft hyphen)'],
    ['https://@api.x.com', at, 'api.x.com'],
    ['https://:@api.x.com/v1', at, 'api.x.com'],
  ];
  for (const [baseUrl, message, readAs] of refused) {
    const res = await call('POST', '/api/v1/upstreams', { name: uniqueConfigName('up-host'), kind: 'openai', baseUrl });
    t.equal(res.statusCode, 400, `${baseUrl} (read as ${readAs}): 400`);
    t.match(res.json<Partial<ErrorReply>>().error?.message, message, `${baseUrl} (read as ${readAs}): the rule`);
  }
  const patched = await call('PATCH', `/api/v1/upstreams/${upstream}`, { baseUrl: 'https://0x7f.1' });
  t.equal(patched.statusCode, 400, 'a patch is held to the same rule');
  t.match(patched.json<Partial<ErrorReply>>().error?.message, host, 'a patch: the rule');
  const tool = await call('PUT', `/api/v1/tool-servers/${uniqueConfigName('ts')}`, { url: 'https://@mcp.example.com/mcp' });
  t.equal(tool.statusCode, 400, "a tool server's url too");
  t.match(tool.json<Partial<ErrorReply>>().error?.message, /^url: must not contain '@' before the host/, 'a tool server: the rule');

  const accepted = ['https://api.openai.com/v1', 'http://localhost:8080/v1', 'http://10.0.0.1:9/v1', 'http://[::1]:8080/v1',
    'https://[2001:db8::1]/v1', 'https://[2001:DB8:0:0:0:0:0:1]:8443', 'https://API.OpenAI.com/v1', 'https://例子.测试/v1',
    'https://xn--fsqu00a.xn--0zwm56d/v1', 'https://Bücher.example/v1', 'https://例子。测试/v1', 'https://llm.internal.example:8443/@team/v1'];
  for (const baseUrl of accepted) {
    const res = await call('POST', '/api/v1/upstreams', { name: uniqueConfigName('up-host'), kind: 'openai', baseUrl });
    t.equal(res.statusCode, 201, `${baseUrl}: ${res.statusCode === 201 ? 'accepted' : res.body}`);
    if (res.statusCode === 201) t.equal(res.json<{ upstream: { baseUrl: string } }>().upstream.baseUrl, baseUrl, `${baseUrl}: stored as written`);
  }
});

t.test('a list refuses a query parameter it does not know, a misspelt filter included, instead of answering with the whole list', async (t) => {
  const lists = ['/api/v1/api-keys', '/api/v1/accounts', '/api/v1/upstreams', '/api/v1/routes', '/api/v1/rate-limit-policies',
    '/api/v1/guardrail-policies', '/api/v1/prices', '/api/v1/tool-servers', '/api/v1/nodes', '/api/v1/spend', '/api/v1/leases', '/api/v1/requests'];
  for (const list of lists) {
    const res = await call('GET', `${list}?acount=${account}`);
    t.equal(res.statusCode, 400, `${list}: 400`);
    t.same(res.json<ErrorReply>().error, { code: 'ZN_ERR_CP_INVALID_REQUEST', type: 'invalid_request_error', param: 'acount', message: 'query: Unrecognized key: "acount"' }, list);
  }
  const keys = expectStatus<{ apiKeys: Array<{ account: string }> }>(await call('GET', `/api/v1/api-keys?account=${account}`), 200);
  t.ok(keys.apiKeys.every((k) => k.account === account), 'the filter spelt right still filters');
  expectStatus(await call('GET', '/api/v1/spend?by=key'), 200);
});

t.test('several problems are reported together, each with its field', async (t) => {
  const res = await call('POST', '/api/v1/routes', { alias: 'bad alias', targets: [{ upstream, model: 'm', weight: -1 }], retries: 9 });
  const { message } = res.json<ErrorReply>().error;
  t.match(message, /alias: must be/);
  t.match(message, /targets\[0\]\.weight: must be an integer/);
  t.match(message, /retries: must be an integer/);
});

t.test('a key naming an unknown account, rate-limit policy and guardrail policy is one 400 naming each of them', async (t) => {
  const before = await version();
  const res = await call('POST', '/api/v1/api-keys', { account: 'no-such-account', name: 'k', rateLimitPolicy: 'no-such-rl', guardrailPolicy: 'no-such-gr' });
  t.equal(res.statusCode, 400);
  t.same(res.json<ErrorReply>().error, {
    code: 'ZN_ERR_CP_INVALID_REQUEST', type: 'invalid_request_error', param: null,
    message: "account: no account named 'no-such-account'; rateLimitPolicy: no rate-limit policy named 'no-such-rl'; guardrailPolicy: no guardrail policy named 'no-such-gr'",
  });
  const known = await call('POST', '/api/v1/api-keys', { account, name: 'k', rateLimitPolicy: 'no-such-rl', guardrailPolicy: 'no-such-gr' });
  t.equal(known.json<ErrorReply>().error.message, "rateLimitPolicy: no rate-limit policy named 'no-such-rl'; guardrailPolicy: no guardrail policy named 'no-such-gr'",
    'a known account is not named');
  t.equal(await version(), before, 'nothing recorded');
});

t.test('a name already taken by a live thing of the same kind is 409 naming the field; after a delete it is free', async (t) => {
  const taken: Array<[string, string, unknown, RegExp]> = [
    ['an account', '/api/v1/accounts', { name: account }, /^name: an account named/],
    ['an upstream', '/api/v1/upstreams', { name: upstream, kind: 'openai', baseUrl: 'https://a.example' }, /^name: an upstream named/],
  ];
  const alias = uniqueConfigName('alias');
  expectStatus(await call('POST', '/api/v1/routes', route({ alias })), 201);
  taken.push(['a route alias', '/api/v1/routes', route({ alias }), /^alias: a model route with alias/]);
  const rate = uniqueConfigName('rl');
  expectStatus(await call('POST', '/api/v1/rate-limit-policies', { name: rate, concurrentRequests: 4 }), 201);
  taken.push(['a rate-limit policy', '/api/v1/rate-limit-policies', { name: rate, concurrentRequests: 2 }, /^name: a rate-limit policy named/]);
  const guard = uniqueConfigName('gr');
  expectStatus(await call('POST', '/api/v1/guardrail-policies', { name: guard, rules: [] }), 201);
  taken.push(['a guardrail policy', '/api/v1/guardrail-policies', { name: guard, rules: [] }, /^name: a guardrail policy named/]);
  for (const [what, url, body, message] of taken) {
    const res = await call('POST', url, body);
    t.equal(res.statusCode, 409, `${what}: 409`);
    t.equal(res.json<ErrorReply>().error.code, 'ZN_ERR_CP_NAME_TAKEN');
    t.match(res.json<ErrorReply>().error.message, message);
  }
  expectStatus(await call('DELETE', `/api/v1/routes/${alias}`), 200);
  expectStatus(await call('POST', '/api/v1/routes', route({ alias })), 201);
  expectStatus(await call('DELETE', `/api/v1/rate-limit-policies/${rate}`), 200);
  expectStatus(await call('POST', '/api/v1/rate-limit-policies', { name: rate, concurrentRequests: 2 }), 201);
});

t.test('an upstream named by a route target or fallback cannot be deleted', async (t) => {
  const used = uniqueConfigName('up');
  const spare = uniqueConfigName('up');
  for (const name of [used, spare]) {
    expectStatus(await call('POST', '/api/v1/upstreams', { name, kind: 'openai', baseUrl: 'https://a.example' }), 201);
  }
  const alias = uniqueConfigName('alias');
  expectStatus(await call('POST', '/api/v1/routes', route({ alias, targets: [{ upstream, model: 'm' }], fallbacks: [{ upstream: used, model: 'f' }] })), 201);
  const res = await call('DELETE', `/api/v1/upstreams/${used}`);
  t.equal(res.statusCode, 409);
  t.equal(res.json<ErrorReply>().error.code, 'ZN_ERR_CP_UPSTREAM_IN_USE');
  t.match(res.json<ErrorReply>().error.message, `'${alias}'`, 'the message names the route');
  expectStatus(await call('GET', `/api/v1/upstreams/${used}`), 200);
  expectStatus(await call('DELETE', `/api/v1/upstreams/${spare}`), 200);
  expectStatus(await call('PUT', `/api/v1/routes/${alias}`, { targets: [{ upstream, model: 'm' }] }), 200);
  expectStatus(await call('DELETE', `/api/v1/upstreams/${used}`), 200);
  t.equal((await call('GET', `/api/v1/upstreams/${used}`)).statusCode, 404, 'deleted once no route names it');
});

t.test("a route whose upstreams mix the OpenAI-compatible and Anthropic families is refused on create and on replace, naming the field", async (t) => {
  // A node serves an alias on one family's APIs only: such a route used to be stored (201), applied
  // by every node without a word, and then every call to it was 404 ZN_ERR_MODEL_NOT_FOUND.
  const claude = uniqueConfigName('claude');
  const openai = uniqueConfigName('oai');
  expectStatus(await call('POST', '/api/v1/upstreams', { name: claude, kind: 'anthropic', baseUrl: 'https://api.anthropic.example/v1' }), 201);
  expectStatus(await call('POST', '/api/v1/upstreams', { name: openai, kind: 'openai', baseUrl: 'https://a.example' }), 201);
  const alias = uniqueConfigName('alias');
  expectStatus(await call('POST', '/api/v1/routes', route({ alias, fallbacks: [{ upstream: openai, model: 'm' }] })), 201);
  const rule = "a route's targets and fallbacks must all be of one API family";
  const refusals: Array<[what: string, method: 'POST' | 'PUT', url: string, body: unknown, message: string]> = [
    ['create: an Anthropic fallback behind an OpenAI-compatible target', 'POST', '/api/v1/routes',
      route({ fallbacks: [{ upstream: claude, model: 'claude-3' }] }),
      `fallbacks[0].upstream: '${claude}' is an Anthropic upstream but targets[0].upstream '${upstream}' is OpenAI-compatible: ${rule}`],
    ['create: an OpenAI target beside an Anthropic one, weight 0 included', 'POST', '/api/v1/routes',
      route({ targets: [{ upstream: claude, model: 'claude-3' }, { upstream: openai, model: 'm', weight: 0 }], fallbacks: [{ upstream, model: 'm' }] }),
      `targets[1].upstream: '${openai}' is an OpenAI-compatible upstream but targets[0].upstream '${claude}' is Anthropic: ${rule}; `
        + `fallbacks[0].upstream: '${upstream}' is an OpenAI-compatible upstream but targets[0].upstream '${claude}' is Anthropic: ${rule}`],
    ['replace: an Anthropic second fallback', 'PUT', `/api/v1/routes/${alias}`,
      { targets: [{ upstream, model: 'm' }], fallbacks: [{ upstream: openai, model: 'm' }, { upstream: claude, model: 'claude-3' }] },
      `fallbacks[1].upstream: '${claude}' is an Anthropic upstream but targets[0].upstream '${upstream}' is OpenAI-compatible: ${rule}`],
  ];
  const versionBefore = expectStatus<{ version: number }>(await call('GET', '/api/v1/config/version'), 200).version;
  for (const [what, method, url, body, message] of refusals) {
    const res = await call(method, url, body);
    t.equal(res.statusCode, 400, `${what}: 400`);
    t.same(res.json<ErrorReply>().error, { code: 'ZN_ERR_CP_INVALID_REQUEST', type: 'invalid_request_error', param: null, message }, what);
  }
  t.equal(expectStatus<{ version: number }>(await call('GET', '/api/v1/config/version'), 200).version, versionBefore, 'no refusal recorded a config version');
  const kept = expectStatus<{ fallbacks: Array<{ upstream: string }> }>(await call('GET', `/api/v1/routes/${alias}`), 200);
  t.same(kept.fallbacks.map((f) => f.upstream), [openai], 'the refused replace changed nothing');
  t.equal((await call('GET', '/api/v1/routes')).json<{ routes: Array<{ targets: unknown; fallbacks: unknown }> }>().routes
    .filter((r) => JSON.stringify([r.targets, r.fallbacks]).includes(`"${claude}"`)).length, 0, 'no refused route was stored');

  // One family is fine: openai and openai-compatible upstreams together, Anthropic ones together.
  expectStatus(await call('PUT', `/api/v1/routes/${alias}`, { targets: [{ upstream, model: 'm' }], fallbacks: [{ upstream: openai, model: 'm' }] }), 200);
  const claude2 = uniqueConfigName('claude');
  expectStatus(await call('POST', '/api/v1/upstreams', { name: claude2, kind: 'anthropic', baseUrl: 'https://api.anthropic.example/v1' }), 201);
  expectStatus(await call('POST', '/api/v1/routes', route({ targets: [{ upstream: claude, model: 'c' }], fallbacks: [{ upstream: claude2, model: 'c' }] })), 201);

  // Nor can a route be mixed from the upstream's side: its kind cannot be changed (nor the upstream
  // deleted and re-created under another kind while a route names it: 409 ZN_ERR_CP_UPSTREAM_IN_USE).
  const patch = await call('PATCH', `/api/v1/upstreams/${openai}`, { kind: 'anthropic' });
  t.equal(patch.statusCode, 400);
  t.match(patch.json<ErrorReply>().error.message, /^kind: unknown field/);
  expectStatus(await call('DELETE', `/api/v1/upstreams/${openai}`), 409);
});

t.test('a policy used by a live account or an active key cannot be deleted', async (t) => {
  const rate = uniqueConfigName('rl');
  const guard = uniqueConfigName('gr');
  expectStatus(await call('POST', '/api/v1/rate-limit-policies', { name: rate, tokensPerMinute: 100000 }), 201);
  expectStatus(await call('POST', '/api/v1/guardrail-policies', { name: guard, rules: [{ detector: 'secret', action: 'block', on: 'input' }] }), 201);
  const holder = uniqueConfigName('acct');
  expectStatus(await call('POST', '/api/v1/accounts', { name: holder, rateLimitPolicy: rate }), 201);
  const { apiKey } = expectStatus<{ apiKey: { id: string } }>(
    await call('POST', '/api/v1/api-keys', { account, name: 'k', rateLimitPolicy: rate, guardrailPolicy: guard }), 201);

  for (const url of [`/api/v1/rate-limit-policies/${rate}`, `/api/v1/guardrail-policies/${guard}`]) {
    const res = await call('DELETE', url);
    t.equal(res.statusCode, 409, `${url}: 409`);
    t.equal(res.json<ErrorReply>().error.code, 'ZN_ERR_CP_POLICY_IN_USE');
  }
  t.match((await call('DELETE', `/api/v1/rate-limit-policies/${rate}`)).json<ErrorReply>().error.message, /1 account\(s\) and 1 active API key/);
  expectStatus(await call('PATCH', `/api/v1/accounts/${holder}`, { rateLimitPolicy: null }), 200);
  expectStatus(await call('POST', `/api/v1/api-keys/${apiKey.id}/revoke`), 200);
  expectStatus(await call('DELETE', `/api/v1/rate-limit-policies/${rate}`), 200);
  expectStatus(await call('DELETE', `/api/v1/guardrail-policies/${guard}`), 200);
  const gone = await call('POST', '/api/v1/accounts', { name: uniqueConfigName('acct'), rateLimitPolicy: rate });
  t.equal(gone.statusCode, 400, 'a deleted policy cannot be attached');
});

t.test('unknown things in the path are 404s with their own codes', async (t) => {
  const missing: Array<[string, 'GET' | 'PATCH' | 'PUT' | 'POST' | 'DELETE', string, unknown, string]> = [
    ['account', 'GET', '/api/v1/accounts/nope', undefined, 'ZN_ERR_CP_ACCOUNT_NOT_FOUND'],
    ['account patch', 'PATCH', '/api/v1/accounts/nope', { status: 'active' }, 'ZN_ERR_CP_ACCOUNT_NOT_FOUND'],
    ['key list filter', 'GET', '/api/v1/api-keys?account=nope', undefined, 'ZN_ERR_CP_ACCOUNT_NOT_FOUND'],
    ['key', 'GET', '/api/v1/api-keys/00000000-0000-4000-8000-000000000000', undefined, 'ZN_ERR_CP_API_KEY_NOT_FOUND'],
    ['key id of another shape', 'POST', '/api/v1/api-keys/not-a-uuid/revoke', undefined, 'ZN_ERR_CP_API_KEY_NOT_FOUND'],
    ['upstream', 'GET', '/api/v1/upstreams/nope', undefined, 'ZN_ERR_CP_UPSTREAM_NOT_FOUND'],
    ['upstream delete', 'DELETE', '/api/v1/upstreams/nope', undefined, 'ZN_ERR_CP_UPSTREAM_NOT_FOUND'],
    ['route', 'GET', '/api/v1/routes/nope', undefined, 'ZN_ERR_CP_ROUTE_NOT_FOUND'],
    ['route replace', 'PUT', '/api/v1/routes/nope', { targets: [{ upstream, model: 'm' }] }, 'ZN_ERR_CP_ROUTE_NOT_FOUND'],
    ['rate-limit policy', 'DELETE', '/api/v1/rate-limit-policies/nope', undefined, 'ZN_ERR_CP_POLICY_NOT_FOUND'],
    ['guardrail policy', 'DELETE', '/api/v1/guardrail-policies/nope', undefined, 'ZN_ERR_CP_POLICY_NOT_FOUND'],
    ['price', 'DELETE', '/api/v1/prices/nope', undefined, 'ZN_ERR_CP_PRICE_NOT_FOUND'],
    ['node settings', 'PATCH', '/api/v1/nodes/nope-node/settings', { spoolQuotaGb: 3 }, 'ZN_ERR_CP_NODE_NOT_FOUND'],
  ];
  for (const [what, method, url, body, code] of missing) {
    const res = await call(method, url, body);
    t.equal(res.statusCode, 404, `${what}: 404`);
    t.equal(res.json<ErrorReply>().error.code, code, `${what}: ${code}`);
  }
});
