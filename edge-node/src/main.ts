#!/usr/bin/env node
// Entry point of the `zenova-node` CLI (node-edge).
import { dropOutputToClosedPipes } from '../../proto/src/cli-closed-output.js';
import { runCli } from './cli/run-cli.js';

dropOutputToClosedPipes(process.stdout, process.stderr);
runCli(process.argv.slice(2), { stdout: process.stdout, stderr: process.stderr, stdin: process.stdin }).then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`zenova-node: unexpected failure: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  },
);
