/**
 * One node name rule, kept in proto/src/node-name.ts: the control plane validates names with it,
 * the nodes table checks the same pattern, and the `zenova` CLI quotes a word back only when it
 * has that shape.
 */
import { readFileSync } from 'node:fs';
import t from 'tap';
import { NODE_NAME_PATTERN, NODE_NAME_RULE } from '../../proto/src/index.js';
import * as nodeValidation from '../../control-plane/src/nodes/node-validation.js';
import { looksLikeNodeName } from '../../installer/src/args.js';

t.test('the control plane validates node names with the one shared pattern and rule', async (t) => {
  t.equal(nodeValidation.NODE_NAME_PATTERN, NODE_NAME_PATTERN, 'the same pattern, not a copy');
  t.equal(nodeValidation.NODE_NAME_RULE, NODE_NAME_RULE);
  t.equal(nodeValidation.nodeNameSchema.safeParse('Edge_One').error?.issues[0]?.message, NODE_NAME_RULE);
});

t.test('the nodes table checks the same pattern as the shared rule', async (t) => {
  const migration = readFileSync(new URL('../../control-plane/src/db/migrations/0002_nodes.sql', import.meta.url), 'utf8');
  const check = /name\s+text not null check \(name ~ '([^']+)'\)/.exec(migration)?.[1];
  t.equal(check, NODE_NAME_PATTERN.source);
});

t.test('the zenova CLI quotes back exactly the words of a node name\'s shape', async (t) => {
  for (const word of ['edge-one', 'ab', 'a'.repeat(31), 'a', 'a'.repeat(32), 'Edge-One', 'edge_one', 'zn_it_abc']) {
    t.equal(looksLikeNodeName(word), NODE_NAME_PATTERN.test(word), word);
  }
});
