/**
 * The bench's `floor` target: the least any Node gateway can do here — fastify (the node's own
 * server framework) parsing the caller's JSON body and passing it through one undici Pool to the
 * upstream, answering with the upstream's JSON. No auth, limits, guardrails, records or logs. It
 * shows what a loopback hop through a Node process costs on this machine by itself, so the node's
 * own overhead is the difference between `node` and `floor`. Prints one JSON line
 * `{"msg":"bench floor listening","port":…}`; argv[2] is the upstream's origin.
 */
import Fastify from 'fastify';
import { Pool } from 'undici';

const origin = process.argv[2];
if (origin === undefined) throw new Error('usage: gateway-floor-main.ts <upstream origin>');
const pool = new Pool(origin, { connections: 256 });
const app = Fastify();
app.post('/v1/chat/completions', async (request, reply) => {
  const upstream = await pool.request({
    method: 'POST',
    path: '/v1/chat/completions',
    headers: { 'content-type': 'application/json', authorization: request.headers.authorization ?? '' },
    body: JSON.stringify(request.body),
  });
  const answer: unknown = await upstream.body.json();
  return reply.code(upstream.statusCode).header('content-type', 'application/json').send(answer);
});
await app.listen({ host: '127.0.0.1', port: 0 });
const address = app.server.address();
process.stdout.write(`${JSON.stringify({ msg: 'bench floor listening', port: typeof address === 'object' && address !== null ? address.port : 0 })}\n`);
const stop = (): void => {
  void app.close().finally(() => process.exit(0));
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
