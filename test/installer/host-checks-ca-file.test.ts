/**
 * `zenova install node --ca-file`: the host checks read the CA file only when it is a regular file
 * of at most 256 KiB; a FIFO, a device, a directory, a larger file or a missing one is the finding
 * NODE-CP-CA-FILE naming the file and why (exit 1, nothing written), and so is a file whose size
 * reads 0 but which holds more (procfs, as /proc/kallsyms), which is not read whole.
 */
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runInstall } from '../../installer/src/commands/install.js';
import { captureCli, hostEnv, listTree } from './fake-host.js';
import { buildNodePackage, releaseKeys } from './package-builder.js';

const MAX_CA_FILE_BYTES = 256 * 1024;
const keys = releaseKeys();
const work = mkdtempSync(join(tmpdir(), 'zn-ca-file-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));

/** /proc/kallsyms when its size reads 0 and it holds more than the limit, else undefined. */
function procFileOverLimit(): string | undefined {
  const file = '/proc/kallsyms';
  try {
    return statSync(file).size === 0 && readFileSync(file).length > MAX_CA_FILE_BYTES ? file : undefined;
  } catch {
    return undefined;
  }
}
const procFile = procFileOverLimit();

/** `install node --check-only --ca-file FILE` on a fresh fake host: the exit, the output, and whether anything was written. */
async function checkWithCaFile(pkg: string, caFile: string): Promise<{ exit: number; out: string; changed: boolean }> {
  const root = mkdtempSync(join(tmpdir(), 'zn-ca-file-root-'));
  try {
    mkdirSync(join(root, 'etc/systemd/system'), { recursive: true });
    const before = listTree(root);
    const cli = captureCli(work);
    const exit = await runInstall(['node', '--package', pkg, '--control-plane', 'https://cp.example.test', '--check-only', '--ca-file', caFile], cli.ctx, hostEnv(root, { keyPem: keys.publicKeyPem }));
    return { exit, out: cli.out(), changed: JSON.stringify(listTree(root)) !== JSON.stringify(before) };
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

t.test('a --ca-file that is a FIFO, a device, a directory, over 256 KiB or missing is NODE-CP-CA-FILE saying which, exit 1, nothing written', async (t) => {
  const pkg = (await buildNodePackage(work, keys)).file;
  const fifo = join(work, 'ca.fifo');
  execFileSync('mkfifo', [fifo]);
  const directory = join(work, 'ca-dir');
  mkdirSync(directory);
  const big = join(work, 'big.pem');
  writeFileSync(big, 'x'.repeat(MAX_CA_FILE_BYTES + 1));
  const notPem = join(work, 'not-a-ca.pem');
  writeFileSync(notPem, 'hello');
  const cases: Array<[string, string, string]> = [
    ['a FIFO', fifo, 'not a regular file'],
    ['a device', '/dev/zero', 'not a regular file'],
    ['a directory', directory, 'not a regular file'],
    ['a file over 256 KiB', big, 'larger than 256 KiB'],
    ['a missing file', join(work, 'absent.pem'), 'ENOENT'],
    ['a file without a PEM certificate', notPem, 'no PEM certificate in it'],
  ];
  for (const [name, file, why] of cases) {
    const r = await checkWithCaFile(pkg, file);
    t.equal(r.exit, 1, `${name}: exit 1`);
    t.match(r.out, `✗ NODE-CP-CA-FILE: --ca-file ${file}: ${why}\n`, `${name}: the finding says why`);
    t.equal(r.changed, false, `${name}: nothing written`);
  }
});

t.test('a --ca-file whose size reads 0 but which holds more than 256 KiB is NODE-CP-CA-FILE larger than 256 KiB, not read whole', { skip: procFile === undefined && 'this host has no /proc/kallsyms that large' }, async (t) => {
  const pkg = (await buildNodePackage(work, keys, { name: 'proc.zpkg' })).file;
  const file = procFile ?? '';
  const r = await checkWithCaFile(pkg, file);
  t.equal(r.exit, 1);
  t.match(r.out, `✗ NODE-CP-CA-FILE: --ca-file ${file}: larger than 256 KiB\n`);
});
