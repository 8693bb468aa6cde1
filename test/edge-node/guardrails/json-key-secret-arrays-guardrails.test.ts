// The secret detector's key rule for JSON read as structured data, past a plain string value: the
// string items of an array under a secret-named key (nested arrays too) are that key's values and
// are masked whole, while an object inside such an array goes by its own keys. A keyed value is
// masked whole when it is a token (no white space) or at most 96 characters (a passphrase), as the
// text rule's quoted value; longer prose under such a key goes by the text rules only, and a JSON
// number is never masked by its key.
import t from 'tap';
import type { GuardrailPolicy } from '../../../proto/src/index.js';
import { startGuardedNode } from './guarded-node.js';
import { askToLogIn, chatChunk, guardedToolCall, loginCallAnswer, streamedToolArguments } from './login-tool-fixtures.js';

const RULES: GuardrailPolicy['rules'] = [{ detector: 'secret', action: 'mask', on: 'both' }];
// Longer than 96 characters, with spaces: prose about a secret, not one.
const PROSE = 'The secret to good bread is a long slow rise, plenty of patience with the dough, and a very hot oven at the very end.';
const SHAPED_KEY = 'sk-proj-Abc123Def456Ghi789Jkl0';
// A 300-character base64 key: no white space, so masked whole at any length.
const LONG_TOKEN = 'QUJD'.repeat(75);
// Over 96 characters, with line breaks: a .env block, masked whole (its names are not ones the text rules know).
const ENV_BLOCK = 'DB_USER=app\nDB_PASS=hunter2hunter2\nSMTP_PASS=Sup3rS3cretMail!\nREGION=eu-west-1\nLOG_LEVEL=info\nFEATURE=x';

/** The tool-call arguments text of a JSON chat answer. */
function argumentsOf(text: string): string {
  const answer = JSON.parse(text) as { choices: { message: { tool_calls: { function: { arguments: string } }[] } }[] };
  return answer.choices[0]!.message.tool_calls[0]!.function.arguments;
}

t.test('string items of an array under a secret-named key are masked whole, nested arrays too, while an object in it goes by its own keys', async (t) => {
  const { upstream, node } = await startGuardedNode(t, RULES);
  upstream.answer = loginCallAnswer(
    JSON.stringify({
      passwords: ['Hunter2Hunter2', 'Another-Pass-9'],
      api_keys: [['abcd1234efgh'], 'short', '12345678'],
      tokens: [{ name: 'build', token: 'Tok3nInside!' }],
      users: ['alice-the-admin'],
    }),
  );
  const text = await askToLogIn(node);
  t.notMatch(text, 'Hunter2Hunter2');
  t.notMatch(text, 'Another-Pass-9');
  t.notMatch(text, 'abcd1234efgh');
  t.same(JSON.parse(argumentsOf(text)), {
    passwords: ['[SECRET]', '[SECRET]'],
    // Under 8 characters, or all digits: no secret's value, as for a plain value.
    api_keys: [['[SECRET]'], 'short', '12345678'],
    // "name" names no secret; "token" inside the object does.
    tokens: [{ name: 'build', token: '[SECRET]' }],
    users: ['alice-the-admin'],
  });
});

t.test('a keyed value is masked whole as a passphrase up to 96 characters or a token of any length, but long prose only where the text rules find a secret', async (t) => {
  const { upstream, node } = await startGuardedNode(t, RULES);
  upstream.answer = loginCallAnswer(
    JSON.stringify({
      secret: PROSE,
      client_secret: `${PROSE} The key is ${SHAPED_KEY} for now.`,
      password: 'correct horse battery staple',
      private_token: LONG_TOKEN,
      secrets: [PROSE, LONG_TOKEN],
      env_secrets: ENV_BLOCK,
    }),
  );
  const text = await askToLogIn(node);
  t.notMatch(text, SHAPED_KEY);
  t.notMatch(text, LONG_TOKEN);
  t.notMatch(text, 'hunter2hunter2');
  t.same(JSON.parse(argumentsOf(text)), {
    secret: PROSE,
    client_secret: `${PROSE} The key is [SECRET] for now.`,
    password: '[SECRET]',
    private_token: '[SECRET]',
    secrets: [PROSE, '[SECRET]'],
    env_secrets: '[SECRET]',
  });
});

t.test('JSON numbers under a secret-named key are not masked, an integer past 2^53 (negative too) included', async (t) => {
  const { upstream, node } = await startGuardedNode(t, RULES);
  const args = '{"token":-123456789012345678901,"pin_tokens":[-98765432109876543210,12345678],"password":"Sup3rS3cretValue"}';
  upstream.answer = loginCallAnswer(args);
  const text = await askToLogIn(node);
  // The password's mask re-serialises the arguments: the numbers go on as the numbers they were.
  t.equal(argumentsOf(text), '{"token":-123456789012345678901,"pin_tokens":[-98765432109876543210,12345678],"password":"[SECRET]"}');
});

t.test('a streamed OpenAI tool call held whole has the array items under a secret-named key masked, and long prose there left as it is', async (t) => {
  const { upstream, node } = await startGuardedNode(t, RULES);
  const whole = JSON.stringify({ user: 'bob', passwords: ['Hunter2Hunter2', ['Another-Pass-9']], secret: PROSE });
  const pieces = [whole.slice(0, 20), whole.slice(20, 33), whole.slice(33, 60), whole.slice(60)];
  upstream.answer = {
    sse: [
      chatChunk({ role: 'assistant', content: null, tool_calls: [{ index: 0, id: 'c', type: 'function', function: { name: 'login', arguments: pieces[0] } }] }),
      ...pieces.slice(1).map((arguments_) => chatChunk({ tool_calls: [{ index: 0, function: { arguments: arguments_ } }] })),
      chatChunk({}, 'tool_calls'),
      'data: [DONE]\n\n',
    ],
  };
  const text = await askToLogIn(node, true);
  const args = streamedToolArguments(text);
  t.notMatch(text, 'Hunter2Hunter2');
  t.notMatch(text, 'Another-Pass-9');
  t.same(JSON.parse(args), { user: 'bob', passwords: ['[SECRET]', ['[SECRET]']], secret: PROSE });
});

t.test('an MCP tools/call has array items under a secret-named key masked in its arguments and in its result', async (t) => {
  const answer = JSON.stringify({
    jsonrpc: '2.0', id: 7,
    result: { content: [{ type: 'text', text: 'ok' }], structuredContent: { api_keys: ['abcd1234efgh', ['ijkl5678mnop']], hosts: ['db.internal.example'] } },
  });
  const { status, text, received } = await guardedToolCall(t, RULES, answer, { user: 'bob', passwords: ['Hunter2Hunter2', 'Another-Pass-9'] });
  t.equal(status, 200, text);
  t.equal(received.length, 1);
  const sent = JSON.parse(received[0]!) as { params: { arguments: unknown } };
  t.same(sent.params.arguments, { user: 'bob', passwords: ['[SECRET]', '[SECRET]'] });
  t.notMatch(text, 'abcd1234efgh');
  t.notMatch(text, 'ijkl5678mnop');
  const back = JSON.parse(text) as { result: { structuredContent: unknown } };
  t.same(back.result.structuredContent, { api_keys: ['[SECRET]', ['[SECRET]']], hosts: ['db.internal.example'] });
});
