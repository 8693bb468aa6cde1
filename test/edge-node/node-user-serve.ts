// `zenova-node serve` run as the node's user (uid 65534) on a state dir root prepared, for tests of
// files a command run with sudo left behind. Needs root: the files are made as root and the node
// runs as the unprivileged uid.
import { spawn } from 'node:child_process';
import { chownSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const NODE_USER = 65534;
export const NEEDS_ROOT: string | false = process.getuid?.() !== 0 ? 'needs root (files of another owner)' : false;
const MAIN = fileURLToPath(new URL('../../edge-node/src/main.ts', import.meta.url));
const DEADLINE_MS = 60_000;

/** Gives the state dir and everything in it (one level: the node's files) to the node's user. */
export function giveToNodeUser(dir: string): void {
  chownSync(dir, NODE_USER, NODE_USER);
  for (const name of readdirSync(dir)) chownSync(path.join(dir, name), NODE_USER, NODE_USER);
}

export interface NodeUserServe {
  code: number | null;
  output: string;
  /** Its own lines on stderr (`zenova-node: …`). */
  said: string[];
  /** It got as far as listening (it was then stopped with SIGTERM). */
  listened: boolean;
}

/**
 * Runs serve as the node's user until it exits on its own, or until it listens, when it is stopped
 * with SIGTERM. The environment is only PATH and HOME: tap's hooks would write tap's dirs as root's.
 */
export function serveAsNodeUser(dir: string): Promise<NodeUserServe> {
  const child = spawn(process.execPath, ['--import', 'tsx', MAIN, 'serve', '--state-dir', dir, '--listen', '127.0.0.1:0'], {
    uid: NODE_USER,
    gid: NODE_USER,
    env: { PATH: process.env.PATH ?? '', HOME: '/tmp' },
  });
  let output = '';
  let stderr = '';
  let listened = false;
  const onData = (chunk: Buffer): void => {
    output += chunk.toString('utf8');
    if (!listened && output.includes('node-edge listening')) {
      listened = true;
      child.kill('SIGTERM');
    }
  };
  child.stdout.on('data', onData);
  child.stderr.on('data', (chunk: Buffer) => {
    stderr += chunk.toString('utf8');
    onData(chunk);
  });
  const deadline = setTimeout(() => child.kill('SIGKILL'), DEADLINE_MS);
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code) => {
      clearTimeout(deadline);
      resolve({ code, output, said: stderr.split('\n').filter((l) => l.startsWith('zenova-node: ')), listened });
    });
  });
}
