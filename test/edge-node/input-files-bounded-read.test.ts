/**
 * The files `zenova-node enroll` (--token-file, --ca-file) and `serve --tls-cert/--tls-key` name are
 * read only when they are regular files, and never more than their limit: a FIFO, a device, a
 * directory or a file over the limit is refused in the command's own words (exit 2 for enroll, the
 * installer's words for a token file). A file whose size reads 0 but which holds more (procfs, as
 * /proc/kallsyms) is refused as too large, not read whole.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, statSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { runInstall } from '../../installer/src/commands/install.js';
import { UsageError } from '../../installer/src/cli-context.js';
import { MAX_TOKEN_FILE_BYTES } from '../../edge-node/src/enroll/token-file.js';
import { CallerTlsError, MAX_TLS_FILE_BYTES, readCallerTls } from '../../edge-node/src/tls/caller-tls.js';
import { captureCli, hostEnv } from '../installer/fake-host.js';
import { createTestCa, issueServerCert } from '../fixtures/tls.js';
import { runNodeCli as run } from './cli-capture.js';

const TOKEN = 'zn_it_Qm91bmRlZFJlYWRPZklucHV0RmlsZXMwMTIzNDU2Nzg5QUJD';
/** enroll-command.ts's limit on --ca-file. */
const MAX_ENROLL_CA_BYTES = 1024 * 1024;
/** Port 9 (discard) is never asked: a refused file ends the command before any connection. */
const NO_CONTROL_PLANE = 'https://127.0.0.1:9';

/** A file whose size reads 0 but which holds more than `bytes`, or undefined on a host without one. */
function procFileOver(bytes: number): string | undefined {
  const file = '/proc/kallsyms';
  try {
    return statSync(file).size === 0 && readFileSync(file).length > bytes ? file : undefined;
  } catch {
    return undefined;
  }
}

const NO_PROC_FILE = 'this host has no /proc/kallsyms that large';
const tokenProc = procFileOver(MAX_TOKEN_FILE_BYTES);
const caProc = procFileOver(MAX_ENROLL_CA_BYTES);
const tlsProc = procFileOver(MAX_TLS_FILE_BYTES);

type OddFile = 'fifo' | 'device' | 'directory' | 'big' | 'missing';

/** Paths to refuse: a FIFO, a device, a directory, a file over `maxBytes`, nothing. */
async function oddFiles(dir: string, maxBytes: number): Promise<Record<OddFile, string>> {
  const fifo = path.join(dir, 'named.fifo');
  execFileSync('mkfifo', [fifo]);
  const directory = path.join(dir, 'a-dir');
  await mkdir(directory);
  const big = path.join(dir, 'big.file');
  await writeFile(big, 'x'.repeat(maxBytes + 1), { mode: 0o600 });
  return { fifo, device: '/dev/zero', directory, big, missing: path.join(dir, 'absent') };
}

/** The message of the CallerTlsError `read` throws. */
function tlsRefusal(read: () => unknown): string {
  try {
    read();
  } catch (err) {
    if (err instanceof CallerTlsError) return err.message;
    throw err;
  }
  throw new Error('read without a CallerTlsError');
}

/** The installer's refusal of the same --token-file, as its usage error says it. */
async function installerRefusal(dir: string, file: string): Promise<string> {
  const argv = ['node', '--package', path.join(dir, 'zenova-node.zpkg'), '--control-plane', 'https://cp.example.test', '--token-file', file];
  const refused = await runInstall(argv, captureCli(dir).ctx, hostEnv(dir)).then(
    (exit) => new Error(`no usage error (exit ${exit})`),
    (err: unknown) => err as Error,
  );
  if (!(refused instanceof UsageError)) throw refused;
  return refused.message;
}

t.test('a token file that is a FIFO, a device, a directory, over 4096 bytes or missing is refused by enroll (exit 2) in the installer\'s words', async (t) => {
  const dir = t.testdir({});
  const files = await oddFiles(dir, MAX_TOKEN_FILE_BYTES);
  const cases: Array<[string, string]> = [
    [files.fifo, `--token-file ${files.fifo} is not a regular file`],
    [files.device, '--token-file /dev/zero is not a regular file'],
    [files.directory, `--token-file ${files.directory} is not a regular file`],
    [files.big, `--token-file ${files.big} is larger than 4096 bytes`],
    [files.missing, `cannot read --token-file ${files.missing} (ENOENT)`],
  ];
  for (const [file, message] of cases) {
    const result = await run(['enroll', '--control-plane', NO_CONTROL_PLANE, '--token-file', file, '--state-dir', path.join(dir, 's')]);
    t.equal(result.code, 2, `${path.basename(file)}: exit 2`);
    t.equal(result.stderr, `zenova-node: ${message}\n`, `${path.basename(file)}: zenova-node's message`);
    t.equal(await installerRefusal(dir, file), message, `${path.basename(file)}: the installer's message`);
  }
});

t.test('a token file whose size reads 0 but which holds more than 4096 bytes is refused as too large, not read whole', { skip: tokenProc === undefined && NO_PROC_FILE }, async (t) => {
  const file = tokenProc ?? '';
  const dir = t.testdir({});
  const result = await run(['enroll', '--control-plane', NO_CONTROL_PLANE, '--token-file', file, '--state-dir', path.join(dir, 's')]);
  t.equal(result.code, 2);
  t.equal(result.stderr, `zenova-node: --token-file ${file} is larger than 4096 bytes\n`);
  t.equal(await installerRefusal(dir, file), `--token-file ${file} is larger than 4096 bytes`);
});

t.test('an enroll --ca-file that is a FIFO, a device, a directory, over 1 MiB or missing is refused with exit 2, naming it', async (t) => {
  const dir = t.testdir({});
  const files = await oddFiles(dir, MAX_ENROLL_CA_BYTES);
  const cases: Array<[string, string]> = [
    [files.fifo, `--ca-file ${files.fifo} is not a regular file`],
    [files.device, '--ca-file /dev/zero is not a regular file'],
    [files.directory, `--ca-file ${files.directory} is not a regular file`],
    [files.big, `--ca-file ${files.big} is larger than 1048576 bytes`],
    [files.missing, `cannot read --ca-file ${files.missing} (ENOENT)`],
  ];
  for (const [file, message] of cases) {
    const result = await run(['enroll', '--control-plane', NO_CONTROL_PLANE, '--token', TOKEN, '--ca-file', file, '--state-dir', path.join(dir, 's')]);
    t.equal(result.code, 2, `${path.basename(file)}: exit 2`);
    t.equal(result.stderr, `zenova-node: ${message}\n`, `${path.basename(file)}: the message`);
  }
});

t.test('an enroll --ca-file whose size reads 0 but which holds more than 1 MiB is refused as too large, not read whole', { skip: caProc === undefined && NO_PROC_FILE }, async (t) => {
  const file = caProc ?? '';
  const dir = t.testdir({});
  const result = await run(['enroll', '--control-plane', NO_CONTROL_PLANE, '--token', TOKEN, '--ca-file', file, '--state-dir', path.join(dir, 's')]);
  t.equal(result.code, 2);
  t.equal(result.stderr, `zenova-node: --ca-file ${file} is larger than 1048576 bytes\n`);
});

t.test('a TLS certificate or key file that is a FIFO, a device, a directory, over 256 KiB or missing is refused with one line naming it', async (t) => {
  const dir = t.testdir({});
  const ca = await createTestCa();
  const pair = await issueServerCert(ca, { dnsNames: ['node.example.test'] });
  const certFile = path.join(dir, 'cert.pem');
  const keyFile = path.join(dir, 'key.pem');
  await writeFile(certFile, pair.certPem);
  await writeFile(keyFile, pair.keyPem, { mode: 0o600 });
  t.equal(readCallerTls({ certFile, keyFile }).certPem, pair.certPem, 'the good pair is read');
  const files = await oddFiles(dir, MAX_TLS_FILE_BYTES);
  for (const what of ['certificate', 'key'] as const) {
    const cases: Array<[string, string]> = [
      [files.fifo, `cannot read the TLS ${what} file ${files.fifo}: it is not a regular file`],
      [files.device, `cannot read the TLS ${what} file /dev/zero: it is not a regular file`],
      [files.directory, `cannot read the TLS ${what} file ${files.directory}: it is a directory`],
      [files.big, `the TLS ${what} file ${files.big} is larger than 256 KiB: not a PEM ${what}`],
      [files.missing, `cannot read the TLS ${what} file ${files.missing}: it does not exist`],
    ];
    for (const [file, message] of cases) {
      const named = what === 'certificate' ? { certFile: file, keyFile } : { certFile, keyFile: file };
      t.equal(tlsRefusal(() => readCallerTls(named)), message, `${path.basename(file)} as the ${what}`);
    }
  }
});

t.test('a TLS certificate file whose size reads 0 but which holds more than 256 KiB is refused as too large, not read whole', { skip: tlsProc === undefined && NO_PROC_FILE }, async (t) => {
  const file = tlsProc ?? '';
  t.equal(tlsRefusal(() => readCallerTls({ certFile: file, keyFile: file })), `the TLS certificate file ${file} is larger than 256 KiB: not a PEM certificate`);
});
