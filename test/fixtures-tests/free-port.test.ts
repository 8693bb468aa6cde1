// The ports handed to servers that restart on the same port come from outside the kernel's
// ephemeral range, so no listen(0) and no outgoing connection can take one while it is unbound.
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import t from 'tap';
import { freePort } from '../fixtures/free-port.js';

t.test('a free port lies outside the ephemeral range and can be bound', async (t) => {
  const [low, high] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number);
  for (let i = 0; i < 20; i += 1) {
    const port = await freePort();
    t.ok(port < low! || port > high!, `port ${port} is outside ${low}-${high}`);
    const server = createServer();
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', resolve);
    });
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});
