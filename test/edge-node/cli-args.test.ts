// Command-line parsing of zenova-node, without starting anything.
import t from 'tap';
import { DEFAULT_LISTEN, UsageError, parseCli, parseListenAddress } from '../../edge-node/src/cli/args.js';

t.test('serve takes --config and --listen, listening on 127.0.0.1:7480 by default', async (t) => {
  t.equal(DEFAULT_LISTEN, '127.0.0.1:7480');
  t.same(parseCli(['serve', '--config', 'a.json']), { kind: 'serve', configFile: 'a.json', listen: { host: '127.0.0.1', port: 7480 } });
  t.same(parseCli(['serve', '--config=a.json', '--listen', '0.0.0.0:0']), { kind: 'serve', configFile: 'a.json', listen: { host: '0.0.0.0', port: 0 } });
});

t.test('listen addresses accept IPv6 in brackets and refuse anything else', async (t) => {
  t.same(parseListenAddress('[::1]:8080'), { host: '::1', port: 8080 });
  t.same(parseListenAddress('localhost:1'), { host: 'localhost', port: 1 });
  for (const bad of ['8080', 'host:', ':80', 'host:65536', 'host:-1', '::1:80', 'a b:1']) {
    t.throws(() => parseListenAddress(bad), UsageError, `refused: ${bad}`);
  }
});

t.test('help, unknown commands and unknown flags', async (t) => {
  t.match(parseCli(['--help']), { kind: 'help', text: /Commands:/ });
  t.match(parseCli(['serve', '-h']), { kind: 'help', text: /--config FILE/ });
  t.throws(() => parseCli(['serve', '--config', 'a', '--verbose']), UsageError);
  t.throws(() => parseCli(['serve', 'extra']), UsageError);
  t.throws(() => parseCli(['launch']), { message: /unknown command "launch"/ });
  t.throws(() => parseCli([]), UsageError);
  t.match(parseCli(['--version']), { kind: 'version' });
});

t.test('a mistyped first word gets the command or option it most likely meant, and a word of another shape is not quoted back', async (t) => {
  t.throws(() => parseCli(['--verison']), { message: 'unknown option --verison; did you mean --version?' });
  t.throws(() => parseCli(['stauts']), { message: 'unknown command "stauts"; did you mean status?' });
  const token = 'zn_it_Q2hlY2tUaGVUb2tlbk5ldmVyQXBwZWFycw.x';
  t.throws(() => parseCli([token]), { message: /^unknown command \(not shown: it does not look like a command name\)/ });
  let message = '';
  try {
    parseCli([token]);
  } catch (err) {
    message = (err as Error).message;
  }
  t.notOk(message.includes(token), 'the token-like word is not in the message');
});

t.test('enroll names every missing option at once', async (t) => {
  t.throws(() => parseCli(['enroll']), { message: 'enroll needs --control-plane URL, and --token TOKEN or --token-file FILE, and --state-dir DIR' });
  t.throws(() => parseCli(['enroll', '--token-file', 'f']), { message: 'enroll needs --control-plane URL, and --state-dir DIR' });
});

t.test('a mistyped option gets the one it most likely meant; a value without its option is not quoted back (it is often a pasted token)', async (t) => {
  t.throws(() => parseCli(['status', '--stat-dir', 'x']), { message: 'unknown option --stat-dir; did you mean --state-dir?' });
  t.throws(() => parseCli(['enroll', '--contol-plane', 'https://cp']), { message: 'unknown option --contol-plane; did you mean --control-plane?' });
  t.throws(() => parseCli(['serve', '--state-dir', 'x', '--verbose']), { message: 'unknown option --verbose; see --help for the options' });
  const secret = 'zt_SUPERSECRET_TOKEN_0123456789';
  for (const argv of [['enroll', '--control-plane', 'https://cp.example', '--state-dir', '/tmp/x', secret], ['serve', secret], ['status', `--${secret}`]]) {
    const err = (() => {
      try {
        parseCli(argv);
      } catch (e) {
        return e as Error;
      }
      return undefined;
    })();
    t.ok(err instanceof UsageError, argv.join(' '));
    t.notOk(err?.message.includes('SUPERSECRET'), `${argv[0]}: not quoted (${err?.message})`);
  }
});

t.test('an option given with an empty value is refused naming the option, never taken as left out', async (t) => {
  const lines: string[][] = [
    ['serve', '--config', 'a.json', '--listen', ''],
    ['serve', '--config', ''],
    ['serve', '--state-dir', ''],
    ['serve', '--config', 'a.json', '--admin-listen', ''],
    ['serve', '--config', 'a.json', '--tls-cert', '', '--tls-key', 'k.pem'],
    ['serve', '--config', 'a.json', '--tls-cert', 'c.pem', '--tls-key', ''],
    ['enroll', '--control-plane', '', '--token', 'x', '--state-dir', 's'],
    ['enroll', '--control-plane', 'https://cp.example.test', '--token-file', '', '--state-dir', 's'],
    ['enroll', '--control-plane', 'https://cp.example.test', '--token', 'x', '--state-dir', ''],
    ['enroll', '--control-plane', 'https://cp.example.test', '--token', 'x', '--state-dir', 's', '--ca-file', ''],
    ['status', '--state-dir', ''],
    ['doctor', '--state-dir', ''],
    ['doctor', '--state-dir', 's', '--tls-cert', '', '--tls-key', ''],
  ];
  for (const argv of lines) {
    const option = argv[argv.indexOf('') - 1] ?? '';
    t.throws(() => parseCli(argv), { name: 'UsageError', message: new RegExp(`^${option} is empty \\(an unset shell variable\\?\\)`) }, argv.join(' '));
  }
  // Env variables of the same options still count as unset when empty: an env file line without a value.
  t.same(parseCli(['serve', '--config', 'a.json'], { ZENOVA_NODE_ADMIN_LISTEN: '', ZENOVA_NODE_TLS_CERT_FILE: '', ZENOVA_NODE_TLS_KEY_FILE: '' }), {
    kind: 'serve',
    configFile: 'a.json',
    listen: { host: '127.0.0.1', port: 7480 },
  });
});

t.test('serve --listen \'\' (the unit\'s --listen ${ZENOVA_NODE_LISTEN} without the variable) says to check ZENOVA_NODE_LISTEN, never serves on the default', async (t) => {
  t.throws(() => parseCli(['serve', '--state-dir', '/opt/zenova-node/data', '--listen', '']), {
    message: /^--listen is empty \(an unset shell variable\?\): .*node-edge\.service passes --listen \$\{ZENOVA_NODE_LISTEN\}: check that <install dir>\/etc\/node\.env has a line ZENOVA_NODE_LISTEN=HOST:PORT$/,
  });
});
