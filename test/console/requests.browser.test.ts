/**
 * Gateway › Requests in real headless Chromium: records delivered the way a node's backfill
 * delivers them (parseRecordBatch + ingestRecords, as the gateway's record batch handler calls
 * them), then found by x-request-id, listed, filtered and paged through the console.
 */
import t from 'tap';
import type { Page } from 'playwright-core';
import type { RequestRecord } from '../../proto/src/index.js';
import { parseRecordBatch } from '../../control-plane/src/records/record-batch-handler.js';
import { ingestRecords } from '../../control-plane/src/records/record-ingestion.js';
import type { IngestResult } from '../../control-plane/src/records/record-ingestion.js';
import { record } from '../edge-node/spool/spool-helpers.js';
import { bearer, validNodeBody } from '../control-plane/nodes-harness.js';
import { launchChromium, loginPage, startConsoleStack } from './browser-harness.js';
import type { LoggedInPage } from './browser-harness.js';

const browser = await launchChromium(t);
const stack = await startConsoleStack(t);

interface Node { nodeId: string; nodeName: string }
const createNode = async (name: string): Promise<Node> => {
  const res = await stack.app.inject({ method: 'POST', url: '/api/v1/nodes', headers: bearer, payload: validNodeBody({ name }) });
  if (res.statusCode !== 201) throw new Error(`node ${name}: ${res.statusCode} ${res.body.slice(0, 200)}`);
  return { nodeId: res.json<{ node: { id: string } }>().node.id, nodeName: name };
};

let batches = 0;
/** One record batch as a node sends it: each record's JSON bytes, checked and ingested as the gateway does. */
const deliver = async (node: Node, entries: Array<RequestRecord | { requestId: string; json: string }>): Promise<IngestResult> => {
  batches += 1;
  const batch = parseRecordBatch({
    recordBatch: {
      batchId: `console-batch-${batches}`,
      records: entries.map((e) => ({ requestId: e.requestId, recordJson: Buffer.from('json' in e ? e.json : JSON.stringify(e)) })),
      firstSequence: 1n,
      lastSequence: BigInt(entries.length),
    },
  }, node.nodeId);
  return ingestRecords(stack.pool, node, batch.records, { batchId: batch.batchId, rejected: batch.rejected, sent: batch.sent });
};

/** The API's own answer for one request id, read past the console. */
const apiError = async (requestId: string): Promise<{ code: string; message: string }> => {
  const res = await stack.app.inject({ method: 'GET', url: `/api/v1/requests/${encodeURIComponent(requestId)}`, headers: bearer });
  if (res.statusCode !== 404) throw new Error(`expected a 404 for ${requestId}, got ${res.statusCode}`);
  return res.json<{ error: { code: string; message: string } }>().error;
};

/**
 * What predicates run in the page use of it. They are passed as functions, not strings: a string
 * predicate that has to poll is run with eval, which the console's CSP refuses. The project's
 * TypeScript has no DOM types, so the little they touch is declared here.
 */
interface PageElement { textContent: string | null; dataset: Record<string, string | undefined> }
interface InPage {
  location: { hash: string };
  document: { querySelector(selector: string): PageElement | null; querySelectorAll(selector: string): Iterable<PageElement> };
}

const field = async (page: Page, name: string): Promise<string> => ((await page.getByTestId(`request-field-${name}`).textContent()) ?? '').trim();

/** Types the id into "Find a call by x-request-id" on the Requests page and waits for the answer. */
const find = async (page: Page, requestId: string, waitFor: 'request-detail' | 'error'): Promise<void> => {
  await page.getByRole('link', { name: 'Gateway › Requests' }).click();
  await page.waitForFunction(() => (globalThis as unknown as InPage).location.hash === '#/requests');
  await page.getByRole('textbox', { name: 'x-request-id', exact: true }).fill(requestId);
  await page.getByRole('button', { name: 'Find' }).click();
  await page.getByTestId(waitFor).waitFor();
};

const node = await createNode('edge-console');
const base = Date.UTC(2026, 10, 2, 9, 0, 0);

t.test('finding a call by its x-request-id shows its node, model, status, tokens and exact cost', async (t) => {
  // The largest cost a record may carry (the schema caps it at 2^53 - 1): as a double divided by
  // 10^6 it prints 9007199254.740992, one micro-unit off.
  const costMicros = Number.MAX_SAFE_INTEGER;
  t.equal((costMicros / 1e6).toFixed(6), '9007199254.740992', 'floating point would show the wrong amount');
  const id = 'req_01JFINDME7Q2';
  t.match(await deliver(node, [record(id, {
    nodeId: node.nodeId,
    receivedAt: base,
    finishedAt: base + 1850,
    clientRequestId: 'caller-trace-7',
    keyId: 'key-finance',
    accountId: 'acct-finance',
    model: 'gpt-4o-mini',
    upstream: 'openai-main',
    upstreamModel: 'gpt-4o-mini-2024-07-18',
    stream: true,
    status: 'ok',
    httpStatus: 200,
    usage: { inputTokens: 1234, outputTokens: 567, estimated: true },
    cost: { reservedMicros: 9_000_000, costMicros, leaseId: 'lease-77', priced: true },
    timings: { totalMs: 1850, upstreamFirstByteMs: 210, upstreamMs: 1800, stagesUs: { identify: 12, authenticate: 340 } },
    guardrails: [{ policyId: 'pol-pii', rule: 2, detector: 'email', action: 'mask', on: 'input', matches: 3 }],
    attempts: [
      { upstream: 'openai-backup', model: 'gpt-4o-mini', outcome: 'status', httpStatus: 503, durationMs: 40 },
      { upstream: 'openai-main', model: 'gpt-4o-mini-2024-07-18', outcome: 'ok', httpStatus: 200, durationMs: 1800 },
    ],
    bodies: { request: '{"model":"gpt-4o-mini","messages":[]}', response: '{"choices":[', truncated: true },
  })]), { accepted: 1 });

  const page = await loginPage(t, stack, browser);
  await find(page, `  ${id}\n`, 'request-detail');
  t.equal(await page.evaluate('location.hash'), `#/requests/${id}`, 'the pasted id, trimmed, is in the address');
  t.equal(await field(page, 'requestId'), id);
  t.equal(await field(page, 'node'), `edge-console (${node.nodeId})`);
  t.equal(await field(page, 'model'), 'gpt-4o-mini');
  t.equal(await field(page, 'upstream'), 'openai-main');
  t.equal(await field(page, 'upstreamModel'), 'gpt-4o-mini-2024-07-18');
  t.equal(await field(page, 'status'), 'ok');
  t.equal(await field(page, 'httpStatus'), '200');
  t.equal(await field(page, 'errorCode'), '—');
  t.equal(await field(page, 'key'), 'key-finance');
  t.equal(await field(page, 'account'), 'acct-finance');
  t.equal(await field(page, 'clientRequestId'), 'caller-trace-7');
  t.equal(await field(page, 'stream'), 'yes');
  t.equal(await field(page, 'inputTokens'), '1234');
  t.equal(await field(page, 'outputTokens'), '567');
  t.match(await field(page, 'estimated'), /^yes/);
  t.equal(await field(page, 'cost'), '9007199254.740991 (9007199254740991 micro-units)', 'the exact amount, digit for digit');
  t.equal(await field(page, 'reserved'), '9.000000 (9000000 micro-units)');
  t.equal(await field(page, 'receivedAt'), new Date(base).toISOString());
  t.equal(await field(page, 'finishedAt'), new Date(base + 1850).toISOString());
  t.equal(await field(page, 'totalMs'), '1850 ms');
  t.equal(await field(page, 'upstreamFirstByteMs'), '210 ms');
  t.equal(await field(page, 'upstreamMs'), '1800 ms');

  const rows = async (testid: string): Promise<string[][]> => page.evaluate<string[][]>(
    `[...document.querySelectorAll('[data-testid="${testid}"] tbody tr')].map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent.trim()))`,
  );
  t.same((await rows('request-stages')).sort(), [['authenticate', '340'], ['identify', '12']], 'per-stage µs');
  t.same(await rows('request-guardrails'), [['pol-pii', '2', 'email', 'mask', 'input', '3']], 'guardrail verdicts');
  t.same(await rows('request-attempts'), [
    ['1', 'openai-backup', 'gpt-4o-mini', 'status', '503', '40 ms'],
    ['2', 'openai-main', 'gpt-4o-mini-2024-07-18', 'ok', '200', '1800 ms'],
  ], 'attempts in order');
  t.equal(await page.getByTestId('request-body-request').textContent(), '{"model":"gpt-4o-mini","messages":[]}');
  t.equal(await page.getByTestId('request-body-response').textContent(), '{"choices":[');
  t.match(await page.getByTestId('request-bodies-truncated').textContent(), /Truncated: yes/);

  // The address is a link of its own: opened afresh, it shows the same record.
  await page.reload();
  await page.getByTestId('request-detail').waitFor();
  t.equal(await field(page, 'cost'), '9007199254.740991 (9007199254740991 micro-units)');
  t.same(page.problems, [], 'no console errors or CSP violations');
});

t.test('an id holding characters that mean something in an address is found through its encoded address', async (t) => {
  const id = 'req/../x?y=1&z#w%2F 100%';
  t.match(await deliver(node, [record(id, { nodeId: node.nodeId, receivedAt: base + 10_000, finishedAt: base + 10_050, model: 'odd-id' })]), { accepted: 1 });
  const page = await loginPage(t, stack, browser);
  await find(page, id, 'request-detail');
  t.equal(await page.evaluate('location.hash'), `#/requests/${encodeURIComponent(id)}`);
  t.equal(await field(page, 'requestId'), id, 'the very record of that id');
  t.equal(await field(page, 'model'), 'odd-id');
  t.same(page.problems, [], 'no console errors or CSP violations');
});

t.test("an unknown id shows the API's 404 message, and a record set aside says why", async (t) => {
  const page = await loginPage(t, stack, browser);
  await find(page, 'req_never_delivered', 'error');
  const unknown = await apiError('req_never_delivered');
  t.match(unknown.message, /delivered/);
  t.equal(((await page.getByTestId('error').textContent()) ?? '').trim(), unknown.message, 'the API\'s own words');
  t.equal(await page.getByTestId('request-detail').count(), 0, 'no record shown');

  // A record the control plane received but could not ingest (its node sent one the schema refuses).
  const bad = { ...record('req_set_aside', { nodeId: node.nodeId, receivedAt: base + 20_000, finishedAt: base + 20_010 }), httpStatus: 'two hundred' };
  t.match(await deliver(node, [{ requestId: bad.requestId, json: JSON.stringify(bad) }]), { accepted: 0, rejected: 1 });
  const setAside = await apiError('req_set_aside');
  t.match(setAside.message, /set aside/);
  await find(page, 'req_set_aside', 'error');
  await page.waitForFunction((message) => (globalThis as unknown as InPage).document.querySelector('[data-testid="error"]')?.textContent?.trim() === message, setAside.message);
  t.equal(((await page.getByTestId('error').textContent()) ?? '').trim(), setAside.message, 'the API\'s words, naming the node and the reason');
  t.match(setAside.message, `node 'edge-console' (${node.nodeId})`);
  t.same(page.problems, [], 'no console errors or CSP violations');
});

t.test("HTML in a record's fields is shown as text and runs nothing", async (t) => {
  const img = '<img src=x onerror="window.__injected=1">';
  const id = 'req_<svg onload="window.__injected=2">';
  t.match(await deliver(node, [record(id, {
    nodeId: node.nodeId,
    receivedAt: base + 30_000,
    finishedAt: base + 30_020,
    clientRequestId: '<b>caller</b>',
    keyId: '<i>key</i>',
    accountId: '<u>acct</u>',
    model: img,
    upstream: '<script>window.__injected=3</script>',
    upstreamModel: '<iframe src="javascript:window.__injected=4">',
    status: 'failed',
    httpStatus: 502,
    errorCode: '<img src=y onerror=alert(1)>',
    timings: { totalMs: 20, upstreamFirstByteMs: null, upstreamMs: null, stagesUs: { '<b>stage</b>': 5 } },
    guardrails: [{ policyId: '<a href="javascript:alert(1)">p</a>', rule: 0, detector: '<em>d</em>', action: 'flag', on: 'output', matches: 1 }],
    attempts: [{ upstream: '<object data=x>', model: '<embed src=x>', outcome: 'error', httpStatus: null, durationMs: 3 }],
    bodies: { request: `{"model":"${img}"}`, response: '</pre><script>window.__injected=5</script>', truncated: false },
  })]), { accepted: 1 });

  const page = await loginPage(t, stack, browser);
  await page.evaluate('window.__dialogs = 0; window.alert = () => { window.__dialogs += 1; }');
  await find(page, id, 'request-detail');
  t.equal(await field(page, 'requestId'), id);
  t.equal(await field(page, 'model'), img, 'the model name is shown as typed, markup and all');
  t.equal(await field(page, 'errorCode'), '<img src=y onerror=alert(1)>');
  t.equal(await field(page, 'upstream'), '<script>window.__injected=3</script>');
  t.equal(await field(page, 'upstreamModel'), '<iframe src="javascript:window.__injected=4">');
  t.equal(await field(page, 'key'), '<i>key</i>');
  t.equal(await page.getByTestId('request-body-response').textContent(), '</pre><script>window.__injected=5</script>');
  const injected = 'img, svg, script, iframe, object, embed, b, i, u, em, [onerror], [onload], a[href^="javascript"]';
  t.equal(await page.getByTestId('request-detail').locator(injected).count(), 0, 'no element made from the record\'s text');
  t.equal(await page.evaluate('window.__injected'), undefined, 'nothing ran');

  // The recent list shows the same record's fields as text too.
  await page.getByRole('link', { name: '← Recent requests' }).click();
  const row = page.getByTestId(`request-row-${id}`);
  await row.waitFor();
  t.match(await row.textContent(), img);
  t.equal(await row.locator(injected).count(), 0, 'no element made from the record\'s text in the list');
  t.equal(await page.evaluate('window.__injected'), undefined, 'nothing ran');
  t.equal(await page.evaluate('window.__dialogs'), 0, 'no alert');
  t.same(page.problems, [], 'no console errors or CSP violations');
});

t.test('the recent list filters by node and status and pages with nextCursor', async (t) => {
  const listNode = await createNode('edge-list');
  const listBase = Date.UTC(2026, 10, 3, 0, 0, 0);
  const id = (i: number): string => `list-${String(i).padStart(3, '0')}`;
  const failed = (i: number): boolean => i % 4 === 0;
  const records = Array.from({ length: 60 }, (_, i) => record(id(i), {
    nodeId: listNode.nodeId,
    receivedAt: listBase + i * 1000,
    finishedAt: listBase + i * 1000 + 30,
    status: failed(i) ? 'failed' : 'ok',
    httpStatus: failed(i) ? 502 : 200,
    errorCode: failed(i) ? 'ZN_ERR_UPSTREAM_ERROR' : null,
    cost: { reservedMicros: 2000, costMicros: 1_000_000 + i, leaseId: 'lease-1', priced: true },
  }));
  t.match(await deliver(listNode, records), { accepted: 60 });

  const page = await loginPage(t, stack, browser);
  await page.getByRole('link', { name: 'Gateway › Requests' }).click();
  // Unfiltered, the newest of every node comes first: this node's newest record is newer than the others'.
  await page.getByTestId(`request-row-${id(59)}`).waitFor();
  const shown = async (): Promise<string[]> => page.evaluate(() =>
    [...(globalThis as unknown as InPage).document.querySelectorAll('[data-testid="requests-table"] tbody tr')].map((tr) => tr.dataset.testid?.replace(/^request-row-/, '') ?? ''));

  await page.getByLabel('Node').fill('edge-list');
  await page.getByRole('button', { name: 'Apply' }).click();
  await page.waitForFunction(() => {
    const rows = [...(globalThis as unknown as InPage).document.querySelectorAll('[data-testid="requests-table"] tbody tr')];
    return rows.length === 50 && rows.every((tr) => tr.dataset.testid?.startsWith('request-row-list-'));
  });
  t.same(await shown(), Array.from({ length: 50 }, (_, k) => id(59 - k)), 'the newest 50 of the node, newest first');
  const first = page.getByTestId(`request-row-${id(59)}`);
  t.match(await first.textContent(), '1.000059', 'cost in units with 6 decimals');

  await page.getByRole('button', { name: 'Next page' }).click();
  await page.getByTestId(`request-row-${id(9)}`).waitFor();
  t.same(await shown(), Array.from({ length: 10 }, (_, k) => id(9 - k)), 'the next page holds the rest, no gap or repeat');
  t.equal(await page.getByRole('button', { name: 'Next page' }).count(), 0, 'the last page offers no next one');
  await page.getByTestId('requests-last-page').waitFor();

  await page.getByRole('button', { name: 'Previous page' }).click();
  await page.getByTestId(`request-row-${id(59)}`).waitFor();
  t.equal((await shown()).length, 50, 'back to the first page');

  await page.getByLabel('Status').selectOption('failed');
  await page.waitForFunction(() => {
    const rows = [...(globalThis as unknown as InPage).document.querySelectorAll('[data-testid="requests-table"] tbody tr')];
    return rows.length === 15 && rows.every((tr) => tr.dataset.status === 'failed');
  });
  t.same(await shown(), Array.from({ length: 60 }, (_, i) => 59 - i).filter(failed).map(id), 'only its failed requests, newest first');
  t.equal(await page.getByRole('button', { name: 'Next page' }).count(), 0, 'one page');
  t.match(await page.getByTestId(`request-row-${id(56)}`).textContent(), 'ZN_ERR_UPSTREAM_ERROR');

  // A row leads to its record.
  await page.getByRole('link', { name: id(56) }).click();
  await page.getByTestId('request-detail').waitFor();
  t.equal(await field(page, 'requestId'), id(56));
  t.equal(await field(page, 'status'), 'failed');
  t.same(page.problems, [], 'no console errors or CSP violations');
});

t.test('the list shows the API\'s message for a node filter that names no node', async (t) => {
  const page: LoggedInPage = await loginPage(t, stack, browser);
  await page.getByRole('link', { name: 'Gateway › Requests' }).click();
  await page.getByLabel('Node').fill('no-such-node');
  await page.getByRole('button', { name: 'Apply' }).click();
  await page.getByTestId('error').waitFor();
  t.match(await page.getByTestId('error').textContent(), "No node named or with id 'no-such-node'");
  t.same(page.problems, [], 'no console errors or CSP violations');
});

t.test('a page that fails to load keeps its place: Try again loads that page, Previous page the one before', async (t) => {
  const retryNode = await createNode('edge-retry');
  const base = Date.UTC(2026, 10, 4, 0, 0, 0);
  const id = (i: number): string => `retry-${String(i).padStart(3, '0')}`;
  t.match(await deliver(retryNode, Array.from({ length: 55 }, (_, i) => record(id(i), { nodeId: retryNode.nodeId, receivedAt: base + i * 1000, finishedAt: base + i * 1000 + 30 }))), { accepted: 55 });
  const page = await loginPage(t, stack, browser);
  await page.getByRole('link', { name: 'Gateway › Requests' }).click();
  await page.getByLabel('Node').fill('edge-retry');
  await page.getByRole('button', { name: 'Apply' }).click();
  await page.getByTestId(`request-row-${id(54)}`).waitFor();

  // The next page's request fails once (the database gone for a moment).
  let failures = 0;
  await page.route('**/api/v1/requests?*cursor=*', async (route) => {
    if (failures++ > 0) return route.continue();
    return route.fulfill({ status: 503, contentType: 'application/json', body: JSON.stringify({ error: { message: 'The control plane database is unavailable; try again shortly.', type: 'server_error', code: 'ZN_ERR_CP_DATABASE_UNAVAILABLE' } }) });
  });
  await page.getByRole('button', { name: 'Next page' }).click();
  await page.getByTestId('error').waitFor();
  t.match(await page.getByTestId('error').textContent(), 'database is unavailable');
  t.equal(await page.getByTestId('requests-page').textContent(), 'Page 2', 'still on page 2');
  t.equal(await page.getByRole('button', { name: 'Previous page' }).count(), 1, 'the page before is offered');

  await page.getByRole('button', { name: 'Try again' }).click();
  await page.getByTestId(`request-row-${id(4)}`).waitFor();
  t.equal(await page.getByTestId('requests-page').textContent(), 'Page 2', 'page 2 loaded, not page 1');
  t.equal(failures, 2, 'one failed load, one that went through');
});

t.test('Back from a request\'s detail, and a reload, keep the list\'s filters and page, which are in the address; values no filter takes are ignored', async (t) => {
  const backNode = await createNode('edge-back');
  const base = Date.UTC(2026, 10, 5, 0, 0, 0);
  const id = (i: number): string => `back-${String(i).padStart(3, '0')}`;
  const failed = (i: number): boolean => i % 2 === 0;
  t.match(await deliver(backNode, Array.from({ length: 120 }, (_, i) => record(id(i), {
    nodeId: backNode.nodeId,
    receivedAt: base + i * 1000,
    finishedAt: base + i * 1000 + 30,
    status: failed(i) ? 'failed' : 'ok',
    httpStatus: failed(i) ? 502 : 200,
    errorCode: failed(i) ? 'ZN_ERR_UPSTREAM_ERROR' : null,
  }))), { accepted: 120 });
  const page = await loginPage(t, stack, browser);
  const hash = async (): Promise<string> => String(await page.evaluate('location.hash'));
  await page.getByRole('link', { name: 'Gateway › Requests' }).click();
  await page.getByLabel('Node').fill('edge-back');
  await page.getByLabel('Status').selectOption('failed');
  await page.getByTestId(`request-row-${id(118)}`).waitFor();
  t.equal(await hash(), '#/requests?node=edge-back&status=failed', 'the filters are in the address');

  // 60 failed: page 2 holds the oldest 10 (ids 18 down to 0).
  await page.getByRole('button', { name: 'Next page' }).click();
  await page.getByTestId(`request-row-${id(18)}`).waitFor();
  t.match(await hash(), /^#\/requests\?node=edge-back&status=failed&cursor=[A-Za-z0-9_.-]+$/, 'and the page\'s cursor');
  const page2 = await hash();

  await page.getByRole('link', { name: id(10) }).click();
  await page.getByTestId('request-detail').waitFor();
  await page.goBack();
  await page.getByTestId(`request-row-${id(18)}`).waitFor();
  t.equal(await hash(), page2, 'Back returns to the same address');
  t.equal(await page.getByLabel('Node').inputValue(), 'edge-back', 'the node filter shown');
  t.equal(await page.getByLabel('Status').inputValue(), 'failed', 'the status filter shown');
  t.equal(await page.getByTestId('requests-page').textContent(), 'Page 2', 'the page it was on');
  t.equal(await page.locator('[data-testid="requests-table"] tbody tr').count(), 10, 'with its rows');

  await page.reload();
  await page.getByTestId(`request-row-${id(18)}`).waitFor();
  t.equal(await page.getByTestId('requests-page').textContent(), 'Page 2', 'a reload keeps it too');
  await page.getByRole('button', { name: 'Previous page' }).click();
  await page.getByTestId(`request-row-${id(118)}`).waitFor();
  t.equal(await hash(), '#/requests?node=edge-back&status=failed', 'Previous page: the first page, filters kept');
  t.equal(await page.getByTestId('requests-page').textContent(), 'Page 1');

  // "← Recent requests" on a record goes back to the list as it was left.
  await page.getByRole('link', { name: id(100) }).click();
  await page.getByTestId('request-detail').waitFor();
  await page.getByRole('link', { name: '← Recent requests' }).click();
  await page.getByTestId(`request-row-${id(118)}`).waitFor();
  t.equal(await hash(), '#/requests?node=edge-back&status=failed', 'the link keeps the filters');

  // Written by hand: what no filter takes is ignored, and said to be; the rest applies.
  await page.goto(`${stack.baseUrl}/console/#/requests?node=edge-back&status=bogus&account=${encodeURIComponent('<b>x</b>')}&cursor=${encodeURIComponent('not a cursor')}&other=1`);
  await page.getByTestId('requests-ignored').waitFor();
  t.equal(await page.getByTestId('requests-ignored').textContent(), 'Ignored from the address (not a value this list takes): account, status, cursor.');
  await page.getByTestId(`request-row-${id(119)}`).waitFor();
  t.equal(await page.getByLabel('Status').inputValue(), '', 'an unknown status is not applied');
  t.equal(await page.getByLabel('Account').inputValue(), '', 'nor an account no account can be called');
  t.equal(await page.getByTestId('requests-page').textContent(), 'Page 1', 'nor a cursor the API never gives');
  t.equal(await page.locator('[data-testid="requests-table"] tbody tr').count(), 50, 'the node\'s newest 50, of every status');
  t.equal(await page.getByTestId('error').count(), 0, 'nothing refused by the API');
  t.same(page.problems, [], 'no console errors or CSP violations');
});
