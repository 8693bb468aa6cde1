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
});
