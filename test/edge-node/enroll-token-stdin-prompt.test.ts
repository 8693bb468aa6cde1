// `zenova-node enroll --token-file -` at a terminal waited without a word, while the installer says
// what to paste and how to end it (install.md: zenova-node "does the same"). At a terminal it now
// prompts on stderr before it reads; piped input gets no prompt.
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { runCli } from '../../edge-node/src/cli/run-cli.js';
import { startEnrollServer } from './enroll-fixtures.js';

const TOKEN = 'zn_it_VG9rZW5TdGRpblByb21wdEF0QVRlcm1pbmFsMDEyMzQ1Njc4OQ';
const PROMPT = 'zenova-node: paste the token from the install command, then press Enter and Ctrl-D\n';

/** Standard input holding `text`, a terminal or not; `onFirstRead` runs when the command starts reading. */
function stdinOf(text: string, isTTY: boolean, onFirstRead: () => void): AsyncIterable<Buffer> & { isTTY: boolean } {
  return {
    isTTY,
    async *[Symbol.asyncIterator]() {
      onFirstRead();
      yield Buffer.from(text);
    },
  };
}

for (const isTTY of [true, false]) {
  t.test(isTTY ? 'at a terminal, enroll --token-file - says what to paste and how to end it before it waits, then enrolls' : 'with piped input, enroll --token-file - prints no prompt and enrolls', async (t) => {
    const server = await startEnrollServer(t);
    const dir = t.testdir({});
    const ca = path.join(dir, 'ca.pem');
    await writeFile(ca, server.ca.certPem);
    let stdout = '';
    let stderr = '';
    let stderrWhenReading: string | undefined;
    const stdin = stdinOf(`${TOKEN}\n`, isTTY, () => (stderrWhenReading = stderr));
    const code = await runCli(['enroll', '--control-plane', server.url, '--token-file', '-', '--state-dir', path.join(dir, 'state'), '--ca-file', ca], {
      stdout: { write: (s: string) => (stdout += s) },
      stderr: { write: (s: string) => (stderr += s) },
      stdin,
    });
    t.equal(code, 0, stderr);
    t.match(stdout, /^enrolled node /);
    t.equal((server.requests[1]?.body as { token?: string }).token, TOKEN);
    t.equal(stderrWhenReading, isTTY ? PROMPT : '', isTTY ? 'the prompt is out before the read' : 'no prompt');
    t.notOk(stderr.includes(TOKEN), 'the token is not printed');
  });
}
