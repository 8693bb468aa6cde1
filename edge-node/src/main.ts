#!/usr/bin/env node
// Entry point of the `zenova-node` CLI (node-edge).
import { runCli } from './cli/run-cli.js';

runCli(process.argv.slice(2), { stdout: process.stdout, stderr: process.stderr, stdin: process.stdin }).then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`zenova-node: unexpected failure: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  },
);
