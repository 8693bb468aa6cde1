// A bundle's content hash (Hello.applied_config_content_sha256) is taken from its canonical bytes
// with the top-level issuedAt member cut out, without parsing them: it must equal the hash of the
// canonical JSON of the parsed bundle without issuedAt, whatever the rest holds (nested issuedAt
// keys, the key's text inside strings, escapes), or node and control plane would disagree on every
// hello and move config versions on for nothing.
import { createHash } from 'node:crypto';
import fc from 'fast-check';
import t from 'tap';
import { canonicalJson, configContentSha256 } from '../../proto/src/index.js';

function parsedContentSha256(bytes: Buffer): Buffer {
  const { issuedAt: _issuedAt, ...content } = JSON.parse(bytes.toString('utf8')) as Record<string, unknown>;
  return createHash('sha256').update(canonicalJson(content), 'utf8').digest();
}

const tricky = fc.constantFrom<unknown>('"issuedAt":"', '{"issuedAt":"x"}', '\\', '\\"', 'issuedAt', { issuedAt: 'nested' }, [{ issuedAt: 1 }]);
const member = fc.oneof(fc.jsonValue({ maxDepth: 3 }), tricky);
const keys = fc.oneof(fc.string({ maxLength: 12 }), fc.constantFrom('a', 'issuedAs', 'issuedAu', 'issued', 'z', '"issuedAt"'));

t.test('the content hash from the bytes equals the hash of the parsed bundle without issuedAt', async (t) => {
  fc.assert(
    fc.property(fc.dictionary(keys, member, { maxKeys: 8 }), fc.option(fc.date({ noInvalidDate: true }), { nil: undefined }), (rest, issuedAt) => {
      const bundle = issuedAt === undefined ? rest : { ...rest, issuedAt: issuedAt.toISOString() };
      const bytes = Buffer.from(canonicalJson(bundle), 'utf8');
      return configContentSha256(bytes).equals(parsedContentSha256(bytes));
    }),
    { numRuns: 3000 },
  );
  t.pass('3000 bundles');
});

t.test('two builds of one config that differ only in issuedAt have one content hash; any other difference changes it', async (t) => {
  const build = (issuedAt: string, extra: Record<string, unknown> = {}) =>
    Buffer.from(canonicalJson({ version: 7, issuedAt, keys: [{ id: 'k1', issuedAt: 'kept' }], ...extra }), 'utf8');
  t.ok(configContentSha256(build('2026-01-01T00:00:00.000Z')).equals(configContentSha256(build('2026-12-02T08:00:00.000Z'))));
  t.notOk(configContentSha256(build('2026-01-01T00:00:00.000Z')).equals(configContentSha256(build('2026-01-01T00:00:00.000Z', { routes: [] }))));
});
