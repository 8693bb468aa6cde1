/**
 * The reconnect timings from the environment (ZENOVA_NODE_RECONNECT_BASE_MS, _MAX_MS,
 * ZENOVA_NODE_REFUSED_RETRY_MS) name a refused value only when it looks like a number: a token
 * pasted into one of them in an env file must not reach the journal through serve's refusal.
 */
import t from 'tap';
import { readServeSettings } from '../../edge-node/src/cli/serve-settings.js';
import { ReconnectSettingsError, reconnectSettingsFromEnv } from '../../edge-node/src/control/reconnect-settings.js';

const TOKEN = 'zn_it_UmVjb25uZWN0U2V0dGluZ3NOb3RFY2hvZWRUZXN0VG9rZW4wMTIz';
const NAMES = ['ZENOVA_NODE_RECONNECT_BASE_MS', 'ZENOVA_NODE_RECONNECT_MAX_MS', 'ZENOVA_NODE_REFUSED_RETRY_MS'];

function messageOf(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    return (err as Error).message;
  }
  throw new Error('no error thrown');
}

t.test('a reconnect variable holding a secret is refused without printing any of it', async (t) => {
  for (const name of NAMES) {
    t.throws(() => reconnectSettingsFromEnv({ [name]: TOKEN }), ReconnectSettingsError, name);
    const message = messageOf(() => reconnectSettingsFromEnv({ [name]: TOKEN }));
    t.equal(message, `${name} must be a whole number of milliseconds from 1 to 86400000, got a value that is not one (not shown: it does not look like a number)`);
    t.notMatch(message, TOKEN.slice(0, 8), `${name}: no part of the token`);
  }
});

t.test('serve\'s settings check (an enrolled node) refuses it the same way, without the secret', async (t) => {
  const message = messageOf(() => readServeSettings({ ZENOVA_NODE_REFUSED_RETRY_MS: TOKEN }, { enrolled: true }));
  t.match(message, /^ZENOVA_NODE_REFUSED_RETRY_MS must be .*\(not shown: it does not look like a number\)$/);
  t.notMatch(message, TOKEN.slice(0, 8));
});

t.test('a refused value that looks like a number is still named, and good values are taken', async (t) => {
  t.equal(messageOf(() => reconnectSettingsFromEnv({ ZENOVA_NODE_RECONNECT_BASE_MS: '0' })), 'ZENOVA_NODE_RECONNECT_BASE_MS must be a whole number of milliseconds from 1 to 86400000, got "0"');
  t.match(messageOf(() => reconnectSettingsFromEnv({ ZENOVA_NODE_RECONNECT_MAX_MS: '86400001' })), /got "86400001"$/);
  t.same(reconnectSettingsFromEnv({ ZENOVA_NODE_RECONNECT_BASE_MS: '250', ZENOVA_NODE_RECONNECT_MAX_MS: '4000', ZENOVA_NODE_REFUSED_RETRY_MS: '9000' }), {
    reconnect: { baseMs: 250, maxMs: 4000 },
    refusedRetryMs: 9000,
  });
});
