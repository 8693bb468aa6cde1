/**
 * The dev stack's demo configuration, made through the admin API exactly as an operator would:
 * an account, the demo upstream, two route aliases and one API key (its secret comes back once
 * and is kept in the dev state so the next start prints the same key).
 */
import type { AdminClient } from './office-primary.js';

export const DEMO_ACCOUNT = 'demo';
export const DEMO_UPSTREAM = 'zenova-demo-upstream';
export const DEMO_MODELS = [
  { alias: 'demo-echo', model: 'demo-echo' },
  { alias: 'demo-embed', model: 'demo-embed' },
] as const;

interface ApiError { error?: { code?: string; message?: string } }

async function must<T>(api: AdminClient, method: string, path: string, body: unknown, ok: number[]): Promise<T> {
  const res = await api.call<T & ApiError>(method, path, body);
  if (!ok.includes(res.status)) {
    throw new Error(`${method} ${path}: ${res.body?.error?.code ?? res.status} ${res.body?.error?.message ?? ''}`.trim());
  }
  return res.body;
}

/** Idempotent: creates what is missing, points the upstream at `upstreamUrl`, returns the key to print. */
export async function ensureDemoConfig(
  api: AdminClient,
  upstreamUrl: string,
  saved: { apiKey?: string; apiKeyId?: string },
): Promise<{ apiKey: string; apiKeyId: string }> {
  // By name: the list comes in pages.
  const account = await api.call('GET', `/api/v1/accounts/${DEMO_ACCOUNT}`);
  if (account.status === 404) {
    await must(api, 'POST', '/api/v1/accounts', { name: DEMO_ACCOUNT }, [201]);
  } else if (account.status !== 200) {
    await must(api, 'GET', `/api/v1/accounts/${DEMO_ACCOUNT}`, undefined, [200]); // throws, naming the error
  }
  const upstreams = await must<{ upstreams: Array<{ name: string; baseUrl: string }> }>(api, 'GET', '/api/v1/upstreams', undefined, [200]);
  const upstream = upstreams.upstreams.find((u) => u.name === DEMO_UPSTREAM);
  if (!upstream) {
    await must(api, 'POST', '/api/v1/upstreams', { name: DEMO_UPSTREAM, kind: 'openai-compatible', baseUrl: upstreamUrl, timeoutMs: 30_000 }, [201]);
  } else if (upstream.baseUrl !== upstreamUrl) {
    await must(api, 'PATCH', `/api/v1/upstreams/${DEMO_UPSTREAM}`, { baseUrl: upstreamUrl }, [200]);
  }
  const routes = await must<{ routes: Array<{ alias: string }> }>(api, 'GET', '/api/v1/routes', undefined, [200]);
  for (const m of DEMO_MODELS) {
    if (!routes.routes.some((r) => r.alias === m.alias)) {
      await must(api, 'POST', '/api/v1/routes', { alias: m.alias, targets: [{ upstream: DEMO_UPSTREAM, model: m.model }] }, [201]);
    }
  }
  if (saved.apiKey && saved.apiKeyId) {
    const key = await api.call<{ account?: string; status?: string }>('GET', `/api/v1/api-keys/${encodeURIComponent(saved.apiKeyId)}`);
    if (key.status === 200 && key.body.account === DEMO_ACCOUNT && key.body.status === 'active') return { apiKey: saved.apiKey, apiKeyId: saved.apiKeyId };
  }
  const created = await must<{ secret: string; apiKey: { id: string } }>(api, 'POST', '/api/v1/api-keys', { account: DEMO_ACCOUNT, name: 'dev-stack-demo' }, [201]);
  return { apiKey: created.secret, apiKeyId: created.apiKey.id };
}
