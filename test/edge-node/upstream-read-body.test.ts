// Upstream bodies are read whole with a ceiling: over it the body is destroyed and the read fails
// with ZN_ERR_UPSTREAM_ERROR; a body cut short (closed before its end) fails instead of being
// taken as complete.
import { PassThrough, Readable } from 'node:stream';
import t from 'tap';
import { isZenovaError } from '../../edge-node/src/errors.js';
import { isBodyTooLarge, parseJsonOrUndefined, readBodyBounded } from '../../edge-node/src/upstream/read-body.js';

t.test('a body under the ceiling is read whole, in order', async (t) => {
  const body = Readable.from([Buffer.from('{"a":'), Buffer.from('1}')], { objectMode: false });
  t.equal((await readBodyBounded(body, 100, 'demo')).toString(), '{"a":1}');
});

t.test('a body over the ceiling is destroyed and refused with ZN_ERR_UPSTREAM_ERROR', async (t) => {
  const body = new PassThrough();
  const read = readBodyBounded(body, 10, 'demo');
  body.write(Buffer.alloc(8));
  body.write(Buffer.alloc(8));
  const err = await read.then(() => undefined, (e: unknown) => e);
  t.ok(isZenovaError(err) && err.code === 'ZN_ERR_UPSTREAM_ERROR', 'ZN_ERR_UPSTREAM_ERROR');
  t.match((err as Error).message, /larger than 10 bytes/);
  t.ok(body.destroyed, 'the body was destroyed');
  t.ok(isBodyTooLarge(err), 'told apart from other failures (the upstream answered: embeddings charge it)');
});

t.test('a body that closes before it ends is an error, not a short answer', async (t) => {
  const body = new PassThrough();
  const read = readBodyBounded(body, 100, 'demo');
  body.write(Buffer.from('{"partial":'));
  body.destroy();
  await t.rejects(read, /closed before it ended/);
  t.notOk(isBodyTooLarge(await read.catch((e: unknown) => e)), 'a cut body is not one too large');
});

t.test("the stream's own error is passed on", async (t) => {
  const body = new PassThrough();
  const read = readBodyBounded(body, 100, 'demo');
  body.destroy(new Error('socket reset'));
  await t.rejects(read, /socket reset/);
});

t.test('a JSON answer with a UTF-8 byte order mark is read as JSON; text that is not JSON is undefined', async (t) => {
  t.same(parseJsonOrUndefined(Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('{"text":"a\\u0040b.example"}')])), { text: 'a@b.example' });
  t.same(parseJsonOrUndefined(Buffer.from('{"a":1}')), { a: 1 });
  t.equal(parseJsonOrUndefined(Buffer.from('not json')), undefined);
  t.equal(parseJsonOrUndefined(Buffer.from([0xef, 0xbb])), undefined);
});
