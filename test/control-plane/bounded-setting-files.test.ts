// The TLS files the control plane's settings name (ZENOVA_TLS_CERT_FILE / _KEY_FILE, the external
// gateway certificate) are read only if they are regular files of at most 256 KiB: a device such
// as /dev/zero was read until memory ran out and a FIFO blocked the start for ever, with nothing said.
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import t from 'tap';
import { readBoundedRegularFile } from '../../control-plane/src/fs/bounded-file.js';
import { ConsoleTlsError, readConsoleTls } from '../../control-plane/src/tls/console-server.js';

t.test('a device, a FIFO or a directory named for the console certificate is refused unread, naming its variable', async (t) => {
  const dir = t.testdir({ 'key.pem': 'not read' });
  const fifo = path.join(dir, 'cert.fifo');
  execFileSync('mkfifo', [fifo]);
  for (const certFile of ['/dev/zero', fifo, dir]) {
    t.throws(() => readConsoleTls({ certFile, keyFile: path.join(dir, 'key.pem') }), { name: ConsoleTlsError.name, message: /^ZENOVA_TLS_CERT_FILE: cannot read .*not a regular file/ }, certFile);
  }
});

t.test('a setting file past 256 KiB is refused without being read on; one within it is read whole', async (t) => {
  const dir = t.testdir({ 'big.pem': 'x'.repeat(256 * 1024 + 1), 'ok.pem': 'y'.repeat(256 * 1024) });
  t.throws(() => readBoundedRegularFile(path.join(dir, 'big.pem')), { code: 'EFBIG', message: /larger than 256 KiB/ });
  t.equal(readBoundedRegularFile(path.join(dir, 'ok.pem')).length, 256 * 1024);
});
