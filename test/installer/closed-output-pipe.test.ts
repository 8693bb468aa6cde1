// A reader of the installer's output that goes away (`zenova install node … | head -1`) no longer
// crashes it mid-run on the write that fails (EPIPE): it runs on to its end, releases the install
// lock and exits with the code its checks gave, as with the output read to the end.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const tsx = path.join(root, 'node_modules/.bin/tsx');
const cli = path.join(root, 'installer/src/cli.ts');
const LOCK = '/run/zenova-node-install.lock';
// A package that is not there: the checks fail, nothing is installed.
const ARGS = ['install', 'node', '--package', '/nonexistent/zenova.zpkg', '--control-plane', 'http://127.0.0.1:1', '--token', 'a'.repeat(43)];

interface Run { code: number | null; stderr: string }

function run(closeOutputAfterFirstChunk: boolean): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(tsx, ['--', cli, ...ARGS], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk; });
    child.stdout.once('data', () => {
      // As `| head -1` does: the read end is closed while the installer still has lines to write.
      if (closeOutputAfterFirstChunk) child.stdout.destroy();
    });
    if (!closeOutputAfterFirstChunk) child.stdout.resume();
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stderr }));
  });
}

t.test('an install whose output reader goes away runs to its end, exits as its checks say and leaves no install lock', async (t) => {
  const whole = await run(false);
  t.not(whole.code, null);
  const cut = await run(true);
  t.equal(cut.code, whole.code, 'the exit code its checks gave');
  t.notMatch(cut.stderr, /EPIPE|Unhandled 'error' event|unexpected failure/, 'no crash on the failed write');
  t.notOk(existsSync(LOCK), 'the install lock was released');
});
