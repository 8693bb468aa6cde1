/**
 * Preloaded (`node --import`) into each TypeScript child of the dev stack (child-process.ts). The
 * children run in process groups of their own, so a Ctrl-C reaches only the dev stack, which stops
 * them one by one; the price is that nothing else would stop a child whose dev stack died without
 * doing so (a crash, SIGKILL). Its stdin is a pipe from the dev stack, which the kernel closes when
 * the dev stack's process ends, however it ends: the child then stops as if sent SIGTERM.
 */
const stdin = process.stdin;
if (!stdin.isTTY) {
  stdin.on('end', () => process.kill(process.pid, 'SIGTERM'));
  stdin.on('error', () => undefined);
  stdin.resume();
  // Waiting on the pipe must not keep a child alive that has otherwise finished.
  (stdin as unknown as { unref?: () => void }).unref?.();
}
