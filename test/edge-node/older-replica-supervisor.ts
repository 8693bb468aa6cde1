// A stand-in for the supervisor of an older release (`serve --replicas K` before its replicas
// reported listen failures over IPC): it forks one replica of the current code, as an in-place
// upgrade does when the old supervisor restarts a replica, without the environment variable that
// says it listens for `listen-failed`, and ignores every message. Prints the replica's exit code.
// Usage: older-replica-supervisor.ts serve --state-dir DIR --listen HOST:PORT
import cluster from 'node:cluster';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const main = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../edge-node/src/main.ts');
cluster.setupPrimary({ exec: main, args: process.argv.slice(2), stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
const env: NodeJS.ProcessEnv = { ...process.env, ZENOVA_NODE_REPLICAS: '2', ZENOVA_NODE_REPLICA_INDEX: '1', NOTIFY_SOCKET: '' };
delete env.ZENOVA_NODE_SUPERVISOR_SAYS_LISTEN_FAILURES;
const worker = cluster.fork(env);
worker.on('message', () => undefined);
worker.on('exit', (code) => {
  process.stdout.write(`older supervisor: the replica exited ${code}\n`);
  process.exit(0);
});
