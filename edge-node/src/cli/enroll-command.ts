// `zenova-node enroll` on the command line: read the token and CA files, enroll, print the result.
// Never prints the token or the credential.
import { mkdir, rmdir } from 'node:fs/promises';
import path from 'node:path';
import { readRegularFileWithin } from '../../../proto/src/bounded-regular-file.js';
import { redactSecret } from '../../../proto/src/redact-secret.js';
import { enroll } from '../enroll/enroll.js';
import { EnrollError } from '../enroll/enroll-errors.js';
import { describeRetired } from '../enroll/retire-node-state.js';
import { readTokenFile, readTokenStdin, STDIN_TOKEN_FILE, TokenFileError, tokenFileNotPrivate, tokenShapeProblem } from '../enroll/token-file.js';
import { holdsPrivateKeyPem, isCertificatePem, separatePemBlocks } from '../state/pem.js';
import { STATE_DIR_MODE, stateDirPathProblem } from '../state/state-store.js';
import type { CliCommand } from './args.js';
import type { CliIo } from './cli-io.js';

const MAX_CA_FILE_BYTES = 1024 * 1024;

type EnrollCommand = Extract<CliCommand, { kind: 'enroll' }>;

/** An input file or token that cannot be used (exit 2). */
class InputFileError extends Error {}

/** The file's text, when it is a regular file of at most `maxBytes` (a device or FIFO is refused unread). */
function readSmallFile(file: string, maxBytes: number, what: string): string {
  const read = readRegularFileWithin(file, maxBytes);
  if (read.ok) return read.text;
  switch (read.reason) {
    case 'missing':
    case 'unreadable':
      throw new InputFileError(`cannot read ${what} ${file} (${read.code})`);
    case 'not-regular':
      throw new InputFileError(`${what} ${file} is not a regular file`);
    case 'too-large':
      throw new InputFileError(`${what} ${file} is larger than ${maxBytes} bytes`);
  }
}

/** A token that cannot be one is a bad command line (exit 2), refused as the installer refuses it. */
function checkToken(token: string, what: string): void {
  const problem = tokenShapeProblem(token, what);
  if (problem !== undefined) throw new InputFileError(problem);
}

async function readToken(command: EnrollCommand, io: CliIo): Promise<string> {
  if (command.token.from === 'argument') {
    const token = command.token.value.trim();
    checkToken(token, '--token');
    return token;
  }
  const { file } = command.token;
  if (file === STDIN_TOKEN_FILE) {
    if (io.stdin === undefined) throw new InputFileError('--token-file - reads the token from standard input, which this run does not have');
    // A terminal waits for the operator: say what for, as the installer does (on stderr, so stdout stays the result).
    if ('isTTY' in io.stdin && io.stdin.isTTY === true) io.stderr.write('zenova-node: paste the token from the install command, then press Enter and Ctrl-D\n');
    const token = await readTokenStdin(io.stdin);
    checkToken(token, 'the token on standard input (--token-file -)');
    return token;
  }
  const { token, mode, notPrivate } = await readTokenFile(file);
  checkToken(token, `the token in --token-file ${file}`);
  if (notPrivate) io.stderr.write(`zenova-node: warning: ${tokenFileNotPrivate(file, mode)}; keep it private (chmod 600 ${file})\n`);
  return token;
}

/**
 * Creates the state dir (0700, with its missing parents) before enrolling, so this run knows which
 * dirs it made itself: mkdir names the first one it created, nothing when the dir was there.
 */
async function createStateDir(dir: string): Promise<string | undefined> {
  return mkdir(path.resolve(dir), { recursive: true, mode: STATE_DIR_MODE }).catch(() => undefined);
}

/**
 * After a failed enrollment, removes the dirs this run created (the state dir up to the first
 * parent it made) while they are empty, so a typo in the URL leaves no empty 0700 dir behind.
 * rmdir removes only an empty dir: one that holds a redemption key for a rerun
 * (enroll-attempt.json) stays, as does any file another process put there since.
 */
async function removeCreated(dir: string, firstCreated: string): Promise<void> {
  for (let at = path.resolve(dir); ; at = path.dirname(at)) {
    const removed = await rmdir(at).then(() => true, () => false);
    if (!removed || at === firstCreated || at === path.dirname(at)) return;
  }
}

export async function runEnrollCommand(command: EnrollCommand, io: CliIo): Promise<number> {
  let token: string;
  let caPem: string | undefined;
  try {
    // Before the token is asked for and before any mkdir (one under /proc never returns): a state
    // dir that can never be one is a bad command line, and nothing is sent.
    const problem = await stateDirPathProblem(command.stateDir);
    if (problem !== undefined) throw new InputFileError(`--state-dir ${path.resolve(command.stateDir)} ${problem}: nothing was sent; pass --state-dir with a directory on a real disk, or a path where one can be created`);
    token = await readToken(command, io);
    if (command.caFile !== undefined) {
      // Certificates concatenated without a newline between them are put on lines of their own.
      caPem = separatePemBlocks(readSmallFile(command.caFile, MAX_CA_FILE_BYTES, '--ca-file'));
      // A cert+key bundle: the key would go to the control-plane connection and into identity.json. Never printed.
      if (holdsPrivateKeyPem(caPem)) {
        throw new InputFileError(`--ca-file ${command.caFile} holds a private key beside its certificate: nothing was sent; pass a file with the CA certificate only (e.g. openssl x509 -in ${command.caFile} -out ca.crt)`);
      }
      if (!isCertificatePem(caPem)) throw new InputFileError(`--ca-file ${command.caFile} holds no PEM certificate`);
    }
  } catch (err) {
    if (!(err instanceof InputFileError || err instanceof TokenFileError)) throw err;
    io.stderr.write(`zenova-node: ${err.message}\n`);
    return 2;
  }

  const created = await createStateDir(command.stateDir);
  try {
    const result = await enroll({
      controlPlaneUrl: command.controlPlaneUrl,
      token,
      stateDir: command.stateDir,
      ...(caPem !== undefined ? { caPem } : {}),
      ...(command.caFile !== undefined ? { caFile: command.caFile } : {}),
      reenroll: command.reenroll,
      notice: (line) => io.stderr.write(`zenova-node: ${line}\n`),
    });
    io.stdout.write(
      `${result.reenrolled ? 're-enrolled' : 'enrolled'} node ${result.nodeName} (id ${result.nodeId})\n` +
        `  control plane: ${result.controlPlaneUrl}\n` +
        `  gateway:       ${result.gatewayTarget}\n` +
        `  state dir:     ${result.stateDir}\n` +
        (result.retired !== undefined ? `  ${describeRetired(result.retired, result.stateDir)}\n` : '') +
        `start it with: zenova-node serve --state-dir ${command.stateDir}\n`,
    );
    return 0;
  } catch (err) {
    if (created !== undefined) await removeCreated(command.stateDir, created);
    const message = err instanceof EnrollError ? err.message : `${(err as Error).message}`;
    // Defence in depth: whatever the source of a message, the token never reaches the terminal.
    io.stderr.write(`zenova-node: enrollment failed: ${redactSecret(message, token)}\n`);
    return 1;
  }
}
