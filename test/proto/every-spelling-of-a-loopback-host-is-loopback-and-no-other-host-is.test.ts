// "Only this host" must mean the same whatever the spelling: the installer's gateway pre-check
// compares the control-plane URL's host (as the URL parser rewrote it) with the gateway's, the node
// refuses a non-loopback admin port, the control plane warns about a loopback gateway address.
import t from 'tap';
import { isLoopbackHost } from '../../proto/src/loopback-host.js';

t.test('loopback in every spelling, URL-parsed ones included', async (t) => {
  for (const host of [
    'localhost', 'LocalHost', 'localhost.', '127.0.0.1', '127.255.0.9', '::1', '[::1]', '0:0:0:0:0:0:0:1',
    '::ffff:127.0.0.1', '[::ffff:127.0.0.1]', new URL('https://[::ffff:127.0.0.1]:8080').hostname, '::FFFF:7F00:1', '0:0:0:0:0:ffff:7f01:203',
  ]) t.ok(isLoopbackHost(host), `${host} is loopback`);
});

t.test('no other host is', async (t) => {
  for (const host of [
    'localhost..', 'localhost.example.com', 'mylocalhost', '128.0.0.1', '10.0.0.1', '0.0.0.0', '::', '::2', '[::2]', '::ffff:10.0.0.1',
    new URL('https://[::ffff:10.0.0.1]').hostname, '::ffff:8000:1', 'fe80::1', 'fe80::1%eth0', '::1%lo', '2001:db8::1', 'example.com', '',
  ]) t.notOk(isLoopbackHost(host), `${host || '(empty)'} is not loopback`);
});
