// A tiny parser for the Prometheus text format (0.0.4), strict enough that a malformed line fails
// the test: HELP/TYPE comments, then `name{label="value",…} number` samples.

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface ParsedMetrics {
  samples: Sample[];
  types: Map<string, string>;
  helps: Map<string, string>;
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*/;
const LABEL = /^([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\["\\n])*)"/;

function parseValue(text: string, line: string): number {
  if (text === '+Inf') return Number.POSITIVE_INFINITY;
  if (text === '-Inf') return Number.NEGATIVE_INFINITY;
  if (text === 'NaN') return Number.NaN;
  if (!/^-?\d+(\.\d+)?([eE][-+]?\d+)?$/.test(text)) throw new Error(`bad value in ${JSON.stringify(line)}`);
  return Number(text);
}

export function parsePrometheusText(text: string): ParsedMetrics {
  if (!text.endsWith('\n')) throw new Error('exposition must end with a newline');
  const samples: Sample[] = [];
  const types = new Map<string, string>();
  const helps = new Map<string, string>();
  for (const line of text.slice(0, -1).split('\n')) {
    if (line.startsWith('# HELP ')) {
      const [, name, help] = /^# HELP (\S+) (.*)$/.exec(line) ?? [];
      if (name === undefined || help === undefined || helps.has(name)) throw new Error(`bad or repeated HELP: ${line}`);
      helps.set(name, help);
      continue;
    }
    if (line.startsWith('# TYPE ')) {
      const [, name, type] = /^# TYPE (\S+) (counter|gauge|histogram|summary|untyped)$/.exec(line) ?? [];
      if (name === undefined || type === undefined || types.has(name)) throw new Error(`bad or repeated TYPE: ${line}`);
      types.set(name, type);
      continue;
    }
    const name = NAME.exec(line)?.[0];
    if (name === undefined) throw new Error(`bad sample line ${JSON.stringify(line)}`);
    let rest = line.slice(name.length);
    const labels: Record<string, string> = {};
    if (rest.startsWith('{')) {
      rest = rest.slice(1);
      while (!rest.startsWith('}')) {
        const match = LABEL.exec(rest);
        if (match === null) throw new Error(`bad labels in ${JSON.stringify(line)}`);
        labels[match[1] as string] = (match[2] as string).replace(/\\(["\\n])/g, (_, c: string) => (c === 'n' ? '\n' : c));
        rest = rest.slice(match[0].length);
        if (rest.startsWith(',')) rest = rest.slice(1);
      }
      rest = rest.slice(1);
    }
    if (!rest.startsWith(' ')) throw new Error(`no value in ${JSON.stringify(line)}`);
    samples.push({ name, labels, value: parseValue(rest.slice(1), line) });
  }
  // Every sample belongs to a declared family (histograms through _bucket/_sum/_count).
  for (const sample of samples) {
    const family = types.has(sample.name) ? sample.name : sample.name.replace(/_(bucket|sum|count)$/, '');
    if (!types.has(family)) throw new Error(`sample ${sample.name} has no TYPE line`);
  }
  return { samples, types, helps };
}

/** The value of the one sample named `name` whose labels include `labels` (undefined if none). */
export function sampleValue(parsed: ParsedMetrics, name: string, labels: Record<string, string> = {}): number | undefined {
  const found = parsed.samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  if (found.length > 1) throw new Error(`${found.length} samples of ${name} match ${JSON.stringify(labels)}`);
  return found[0]?.value;
}
