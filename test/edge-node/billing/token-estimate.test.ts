// The node's own token estimate (prompt pre-authorisation, tokens/min, usage an upstream did not
// give): four ASCII characters per token, but scripts BPE vocabularies merge little (Thai,
// Devanagari, Cyrillic) and emoji are not estimated at a quarter of what they are billed.
import t from 'tap';
import { denseTextWeight, estimateTokens, tokensForCharacters } from '../../../edge-node/src/providers/token-estimate.js';

t.test('ASCII text is about four characters per token, rounded up', async (t) => {
  t.equal(estimateTokens(''), 0);
  t.equal(estimateTokens('a'), 1);
  t.equal(estimateTokens('hello world!'), 3);
  t.equal(denseTextWeight('plain ASCII, no weight'), 0);
});

t.test('a CJK character is a token', async (t) => {
  t.equal(estimateTokens('你好世界'), 4);
  t.equal(estimateTokens('こんにちは'), 5);
  t.equal(estimateTokens('안녕하세요'), 5);
});

t.test('Thai, Devanagari and Cyrillic are a token per two characters, not four', async (t) => {
  t.equal(estimateTokens('สวัสดีครับ'), 5, 'ten Thai characters');
  t.equal(estimateTokens('नमस्ते दुनिया'), 7, 'twelve Devanagari characters and a space: (13 + 12) / 4');
  t.equal(estimateTokens('Привет'), 3);
});

t.test('an emoji is two tokens, not half of one', async (t) => {
  t.equal(estimateTokens('😀'), 2);
  t.equal(estimateTokens('😀😀😀😀'), 8);
  t.equal(estimateTokens('ok 👍'), 3, 'three ASCII characters and one emoji: (3 + 2 + 6) / 4');
});

t.test('text counted in pieces estimates as the whole does', async (t) => {
  const pieces = ['Hello ', '世界', ' — สวัสดี ', '🎉', ' done'];
  const length = pieces.reduce((n, p) => n + p.length, 0);
  const dense = pieces.reduce((n, p) => n + denseTextWeight(p), 0);
  t.equal(tokensForCharacters(length, dense), estimateTokens(pieces.join('')));
});
