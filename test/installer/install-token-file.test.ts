/**
 * `--token-file` as operators write it: the token is its one non-blank line (blank lines around it
 * are fine), a file with more than one non-blank line is refused before any check, and the "delete
 * the token file" line at the end pastes into a shell as one command, whatever the path holds.
 */
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { runInstall } from '../../installer/src/commands/install.js';
import { UsageError } from '../../installer/src/cli-context.js';
import type { Enroller } from '../../installer/src/install/install-node.js';
import { captureCli, fakeServices, hostEnv, listTree } from './fake-host.js';
import { buildNodePackage, releaseKeys } from './package-builder.js';

const keys = releaseKeys();
// A work dir with a space and a quote in its name, as a home dir or a copied folder may have.
const work = mkdtempSync(join(tmpdir(), "zn token's work "));
t.teardown(() => rmSync(work, { recursive: true, force: true }));

const redeemed: string[] = [];
const enrollOk: Enroller = async (opts) => {
  redeemed.push(opts.token);
  mkdirSync(opts.stateDir, { recursive: true, mode: 0o700 });
  writeFileSync(join(opts.stateDir, 'identity.json'), '{"nodeName":"n1"}');
  return { nodeId: 'id-1', nodeName: 'n1', controlPlaneUrl: opts.controlPlaneUrl, gatewayTarget: 'gw:8443', stateDir: opts.stateDir, reenrolled: false };
};

async function install(tokenFile: string): Promise<{ exit: number; out: string }> {
  const pkg = await buildNodePackage(work, keys);
  const root = mkdtempSync(join(tmpdir(), 'zn-token-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const cli = captureCli(work);
  const exit = await runInstall(['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--token-file', tokenFile], cli.ctx, hostEnv(root, { keyPem: keys.publicKeyPem, services: fakeServices(root), enroll: enrollOk }));
  return { exit, out: cli.out() };
}

t.test('a token file whose first line is blank is read from its first non-blank line', async (t) => {
  const file = join(work, 'leading-blank.token');
  writeFileSync(file, '\n  \nzn_it_LEADINGBLANK1\n\n', { mode: 0o600 });
  const r = await install(file);
  t.equal(r.exit, 0, r.out);
  t.equal(redeemed.at(-1), 'zn_it_LEADINGBLANK1');
});

t.test('a token file with more than one non-blank line is refused as a usage error before any check or write', async (t) => {
  const file = join(work, 'two-lines.token');
  writeFileSync(file, 'zn_it_FIRSTLINE1\nzn_it_SECONDLINE2\n', { mode: 0o600 });
  const root = mkdtempSync(join(tmpdir(), 'zn-token-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const services = fakeServices(root);
  const before = listTree(root);
  const cli = captureCli(work);
  const count = redeemed.length;
  const refused = await runInstall(['node', '--package', join(work, 'zenova-node.zpkg'), '--control-plane', 'https://cp.example.test', '--token-file', file], cli.ctx, hostEnv(root, { keyPem: keys.publicKeyPem, services, enroll: enrollOk })).then(
    (exit) => new Error(`no usage error (exit ${exit})`),
    (err: unknown) => err as Error,
  );
  t.type(refused, UsageError, 'a usage error (exit 2)');
  t.match(refused.message, /--token-file .*two-lines\.token has 2 non-blank lines; a token file holds one token/);
  t.notMatch(cli.out(), /checking this host/, 'no check ran');
  t.same(listTree(root), before, 'nothing written');
  t.same(services.calls, []);
  t.equal(redeemed.length, count, 'no token redeemed');
});

/** `--token-file -` with `stdin` (undefined: a run without standard input). */
async function installFromStdin(stdin: string | undefined): Promise<{ exit: number; out: string } | Error> {
  const pkg = await buildNodePackage(work, keys);
  const root = mkdtempSync(join(tmpdir(), 'zn-token-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const cli = captureCli(work);
  const ctx = stdin === undefined ? cli.ctx : { ...cli.ctx, stdin: Readable.from([Buffer.from(stdin)]) };
  return runInstall(['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--token-file', '-'], ctx, hostEnv(root, { keyPem: keys.publicKeyPem, services: fakeServices(root), enroll: enrollOk })).then(
    (exit) => ({ exit, out: cli.out() }),
    (err: unknown) => err as Error,
  );
}

t.test('--token-file - reads the token from standard input by the same rules, and prints no file to delete', async (t) => {
  const r = await installFromStdin('\nzn_it_FROMSTDIN1\n');
  if (r instanceof Error) throw r;
  t.equal(r.exit, 0, r.out);
  t.equal(redeemed.at(-1), 'zn_it_FROMSTDIN1');
  t.notMatch(r.out, /Delete the token file/);
  const count = redeemed.length;
  for (const [stdin, message] of [
    ['zn_it_ONE1\nzn_it_TWO2\n', /^--token-file - \(standard input\) has 2 non-blank lines/],
    [`${'x'.repeat(5000)}\n`, /^--token-file - \(standard input\) holds more than 4096 bytes/],
    ['zn it\n', /^the token on standard input \(--token-file -\) contains whitespace/],
    [undefined, /^--token-file - reads the token from standard input, which this run does not have/],
  ] as const) {
    const refused = await installFromStdin(stdin);
    t.type(refused, UsageError, `${JSON.stringify(stdin?.slice(0, 20))}: a usage error (exit 2)`);
    t.match((refused as Error).message, message);
  }
  t.equal(redeemed.length, count, 'no token redeemed');
});

t.test('the printed command to delete the token file removes exactly that file when pasted into a shell', async (t) => {
  const file = join(work, "it's the token file");
  writeFileSync(file, 'zn_it_QUOTEDPATH1\n', { mode: 0o600 });
  const decoy = join(work, 'it');
  writeFileSync(decoy, 'not the token file');
  const r = await install(file);
  t.equal(r.exit, 0, r.out);
  const line = /Delete the token file now: (.*)\n/.exec(r.out)?.[1];
  t.equal(line, `rm -f -- '${work.replaceAll("'", "'\\''")}/it'\\''s the token file'`);
  execFileSync('sh', ['-c', line ?? 'false'], { cwd: work });
  t.notOk(existsSync(file), 'the token file is gone');
  t.ok(existsSync(decoy), 'nothing else was removed');
});
