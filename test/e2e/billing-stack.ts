// Shared by the billing end-to-end tests: a priced chat call through a node, and the account's
// balance and spend from the admin API.
import { fetch } from 'undici';
import type { ControlPlane } from './stack.js';

export interface PricedCall {
  status: number;
  code: string | undefined;
  requestId: string | null;
  usage: { prompt_tokens: number; completion_tokens: number } | undefined;
}

export async function pricedCall(nodeUrl: string, apiKey: string, maxTokens: number): Promise<PricedCall> {
  const res = await fetch(`${nodeUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'echo', max_tokens: maxTokens, messages: [{ role: 'user', content: 'what does this cost?' }] }),
  });
  const body = (await res.json().catch(() => ({}))) as { error?: { code?: string }; usage?: PricedCall['usage'] };
  return { status: res.status, code: body.error?.code, requestId: res.headers.get('x-request-id'), usage: body.usage };
}

export interface Price { inputMicrosPerToken: number; outputMicrosPerToken: number; requestMicros: number }

export function costOf(call: PricedCall, price: Price): number {
  if (call.usage === undefined) throw new Error(`call ${call.requestId} has no usage`);
  return call.usage.prompt_tokens * price.inputMicrosPerToken + call.usage.completion_tokens * price.outputMicrosPerToken + price.requestMicros;
}

export async function balanceOf(cp: ControlPlane, account: string): Promise<{ balanceMicros: number; spentMicros: number; outstandingLeasesMicros: number }> {
  const res = await cp.api<{ balance: { balanceMicros: number; spentMicros: number; outstandingLeasesMicros: number } }>('GET', `/api/v1/accounts/${account}/balance`);
  if (res.status !== 200) throw new Error(`balance of ${account}: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body.balance;
}

export async function debitedRequests(cp: ControlPlane, account: string): Promise<number> {
  const res = await cp.api<{ rows: Array<{ name: string | null; requests: number }> }>('GET', '/api/v1/spend?by=account');
  return res.body.rows.find((r) => r.name === account)?.requests ?? 0;
}

export async function mustApi(cp: ControlPlane, method: string, path: string, body: unknown, want: number): Promise<void> {
  const res = await cp.api(method, path, body);
  if (res.status !== want) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(res.body)}`);
}
