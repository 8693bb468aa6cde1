/**
 * `zenova gateway-node … NAME` refuses `.` and `..` (URL resolution would send the request to
 * another route) with the control plane's own node name rule (proto/src/node-name.ts), so the CLI
 * and the API describe a node name in the same words.
 */
import t from 'tap';
import { NODE_NAME_RULE } from '../../proto/src/node-name.js';
import { nodeNameArgument, parseOptions } from '../../installer/src/args.js';

const OPTIONS = { name: { type: 'string' } } as const;

t.test('a node name of . or .. is refused with the rule the control plane gives for a bad name', async (t) => {
  for (const argv of [['..'], ['--name', '.']]) {
    const parsed = parseOptions(argv, OPTIONS, 'gateway-node show');
    t.throws(() => nodeNameArgument(parsed, 'gateway-node show'), {
      name: 'UsageError',
      message: `${JSON.stringify(argv.at(-1))} is not a node name: a node name ${NODE_NAME_RULE}`,
    }, argv.join(' '));
  }
});

t.test('a node name of the right shape is taken as given', async (t) => {
  t.equal(nodeNameArgument(parseOptions(['edge-one'], OPTIONS, 'gateway-node show'), 'gateway-node show'), 'edge-one');
});
