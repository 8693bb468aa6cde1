/**
 * Runs a command body with an admin API client: resolves the connection settings (usage errors
 * when missing), closes the client afterwards, and adds to an authentication refusal where the
 * token came from, so a stale .zenova/dev.env is easy to spot. The token itself is never shown.
 */
import type { CliContext } from '../cli-context.js';
import { ApiError, createAdminClient } from './admin-client.js';
import type { AdminClient } from './admin-client.js';
import { TOKEN_VARIABLE, resolveConnection } from './connection-settings.js';
import type { ConnectionSettings } from './connection-settings.js';

export async function withAdminClient<T>(
  ctx: CliContext,
  envFile: string | undefined,
  helpCommand: string,
  body: (client: AdminClient, conn: ConnectionSettings) => Promise<T>,
): Promise<T> {
  const conn = resolveConnection(ctx, envFile, helpCommand);
  const client = createAdminClient(conn);
  try {
    return await body(client, conn);
  } catch (err) {
    if (err instanceof ApiError && err.code === 'ZN_ERR_CP_UNAUTHENTICATED') {
      throw new ApiError(err.code, `${err.message} (check ${TOKEN_VARIABLE} from ${conn.source} against ${conn.displayUrl})`, err.status);
    }
    throw err;
  } finally {
    await client.close();
  }
}
