// `zenova-node serve`: load the config, listen, and shut down cleanly on SIGINT/SIGTERM.
import type { AddressInfo } from 'node:net';
import { buildApp } from '../app.js';
import { loadLocalConfig } from '../config/local-config.js';
import type { Logger } from '../logger.js';
import type { ListenAddress } from './args.js';

/** How long in-flight requests (long streams included) may run on after a stop signal. */
export const SHUTDOWN_DEADLINE_MS = 10_000;

export interface ServeOptions {
  configFile: string;
  listen: ListenAddress;
  logger: Logger;
  shutdownDeadlineMs?: number;
}

/** `http://HOST:PORT` with IPv6 hosts bracketed. */
export function listenUrl(host: string, port: number): string {
  return `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
}

/**
 * Serves until SIGINT/SIGTERM, then stops accepting, lets in-flight requests finish until the
 * deadline, cuts whatever is left, and resolves with the exit code. A bad config file rejects
 * with LocalConfigError before anything listens.
 */
export async function serve(opts: ServeOptions): Promise<number> {
  const config = await loadLocalConfig(opts.configFile);
  const app = await buildApp({ config, logger: opts.logger });
  try {
    await app.listen({ host: opts.listen.host, port: opts.listen.port });
  } catch (err) {
    opts.logger.error({ err, listen: opts.listen }, 'node-edge could not listen');
    await app.close();
    return 1;
  }
  const { port } = app.server.address() as AddressInfo;
  opts.logger.info({ url: listenUrl(opts.listen.host, port), node: config.node?.name }, 'node-edge listening');

  return new Promise<number>((resolve) => {
    let stopping = false;
    const onSignal = (signal: NodeJS.Signals): void => {
      if (stopping) {
        // A second signal means "now": drop the remaining connections instead of waiting.
        app.server.closeAllConnections();
        return;
      }
      stopping = true;
      opts.logger.info({ signal }, 'node-edge stopping');
      const deadline = setTimeout(() => {
        opts.logger.warn('shutdown deadline passed; closing remaining connections');
        app.server.closeAllConnections();
      }, opts.shutdownDeadlineMs ?? SHUTDOWN_DEADLINE_MS);
      deadline.unref();
      app.close().then(
        () => {
          clearTimeout(deadline);
          process.off('SIGINT', onSignal).off('SIGTERM', onSignal);
          opts.logger.info('node-edge stopped');
          resolve(0);
        },
        (err: unknown) => {
          opts.logger.error({ err }, 'node-edge did not close cleanly');
          resolve(1);
        },
      );
    };
    process.on('SIGINT', onSignal).on('SIGTERM', onSignal);
  });
}
