// zenova_node_guardrail_rejections_total{on} names the direction a guardrail refusal was for, also
// for fail-closed refusals that add no verdict (a direction whose rules cannot be applied).
import t from 'tap';
import { createNodePipelineMetrics } from '../../../edge-node/src/metrics/node-pipeline-metrics.js';
import { guardContext, policy } from '../guardrails/guardrail-fixtures.js';
import { parsePrometheusText, sampleValue } from './prometheus-text.js';

function refusedUnder(rules: Parameters<typeof policy>[1]): ReturnType<typeof guardContext>['ctx'] {
  const p = policy('p', rules);
  const { ctx } = guardContext({ policies: [p], policyId: 'p', stream: true });
  ctx.outcome = { status: 'rejected', httpStatus: 400, errorCode: 'ZN_ERR_GUARDRAIL_BLOCKED' };
  return ctx;
}

t.test('a refusal because the output rules cannot be applied is counted as on="output"', async (t) => {
  const metrics = createNodePipelineMetrics(() => ({ spoolBytes: 0, backfillBacklog: 0 }));
  // A keywords rule with no list cannot be applied: a stream under it is refused before forwarding.
  metrics.requestFinished(refusedUnder([{ detector: 'keywords', action: 'mask', on: 'output' }]));
  const parsed = parsePrometheusText(metrics.render());
  t.equal(sampleValue(parsed, 'zenova_node_guardrail_rejections_total', { on: 'output' }), 1);
  t.equal(sampleValue(parsed, 'zenova_node_guardrail_rejections_total', { on: 'input' }) ?? 0, 0);
});

t.test('a refusal because the input rules cannot be applied is counted as on="input"', async (t) => {
  const metrics = createNodePipelineMetrics(() => ({ spoolBytes: 0, backfillBacklog: 0 }));
  metrics.requestFinished(refusedUnder([{ detector: 'regex', action: 'block', on: 'input' }]));
  const parsed = parsePrometheusText(metrics.render());
  t.equal(sampleValue(parsed, 'zenova_node_guardrail_rejections_total', { on: 'input' }), 1);
});

t.test('an up-front refusal of what the rules cannot check is counted for the direction whose rules refused it', async (t) => {
  const metrics = createNodePipelineMetrics(() => ({ spoolBytes: 0, backfillBacklog: 0 }));
  const uncheckable = (rules: Parameters<typeof policy>[1], unchecked: { input?: boolean; output?: boolean }): ReturnType<typeof guardContext>['ctx'] => {
    const ctx = refusedUnder(rules);
    ctx.outcome = { status: 'rejected', httpStatus: 400, errorCode: 'ZN_ERR_GUARDRAIL_UNCHECKABLE' };
    if (unchecked.input === true) ctx.uncheckedInput = { param: 'input', what: 'token ids' };
    if (unchecked.output === true) ctx.uncheckedOutput = { param: 'logprobs', what: 'log probabilities' };
    return ctx;
  };
  // Token ids under input rules, and logprobs asked for under output rules.
  metrics.requestFinished(uncheckable([{ detector: 'email', action: 'block', on: 'input' }], { input: true }));
  metrics.requestFinished(uncheckable([{ detector: 'email', action: 'mask', on: 'output' }], { output: true, input: true }));
  const parsed = parsePrometheusText(metrics.render());
  t.equal(sampleValue(parsed, 'zenova_node_guardrail_rejections_total', { on: 'input' }), 1);
  t.equal(sampleValue(parsed, 'zenova_node_guardrail_rejections_total', { on: 'output' }), 1);
});
