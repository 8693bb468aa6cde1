/**
 * givenValue, the one wording the CLIs use to name an option's or a variable's value back in a
 * usage error: quoted when it has the shape expected, otherwise only the shape expected, never the
 * value (it may be a token pasted in the wrong place).
 */
import t from 'tap';
import { NUMBER_SHAPE, givenValue } from '../../proto/src/cli-usage-errors.js';

const TOKEN = 'zn_it_R2l2ZW5WYWx1ZUhlbHBlclRlc3RUb2tlbjAxMjM0NTY3ODk';

t.test('a value of the shape expected is quoted back after "got"', async (t) => {
  t.equal(givenValue('0', NUMBER_SHAPE, 'a number'), 'got "0"');
  t.equal(givenValue('-12', NUMBER_SHAPE, 'a number'), 'got "-12"', 'a sign is part of a number');
  t.equal(givenValue('a"b', true, 'a word'), 'got "a\\"b"', 'quoted as JSON, so the end of the value is plain');
});

t.test('a value of another shape is never shown: the message says what was expected instead', async (t) => {
  for (const raw of [TOKEN, '12345678901', '1 2', '']) {
    const message = givenValue(raw, NUMBER_SHAPE, 'a number');
    t.equal(message, 'got a value that is not one (not shown: it does not look like a number)', JSON.stringify(raw));
  }
  t.equal(givenValue(TOKEN, /^[a-z]+:\d+$/, 'HOST:PORT'), 'got a value that is not one (not shown: it does not look like HOST:PORT)', 'the shape is named as given, article and all');
  t.notMatch(givenValue(TOKEN, false, 'an http(s) URL'), TOKEN.slice(0, 8), 'a caller\'s own check (false) hides it too');
});

t.test('a message that does not say "got" words the value its own way, by the same rule', async (t) => {
  const words = { shown: 'ZENOVA_NODE_REPLICAS=', notShown: 'ZENOVA_NODE_REPLICAS' };
  t.equal(givenValue('3', NUMBER_SHAPE, 'a number', words), 'ZENOVA_NODE_REPLICAS="3"');
  t.equal(givenValue(TOKEN, NUMBER_SHAPE, 'a number', words), 'ZENOVA_NODE_REPLICAS (not shown: it does not look like a number)');
  t.equal(givenValue(TOKEN, false, 'a host name or address', { notShown: 'got another host' }), 'got another host (not shown: it does not look like a host name or address)');
});
