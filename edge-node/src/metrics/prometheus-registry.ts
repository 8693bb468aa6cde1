/**
 * A small Prometheus registry (text exposition format 0.0.4) with no dependency: counters, gauges
 * and histograms with fixed label names. A labelled series is created once and kept, so callers can
 * hold on to it (`labels(...)`) and the hot path is a Map lookup at most, then plain arithmetic.
 */

export const PROMETHEUS_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

/** Label values as the format wants them: backslash, double quote and newline escaped. */
function escapeLabel(value: string): string {
  return value.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
}

function escapeHelp(text: string): string {
  return text.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
}

function formatNumber(value: number): string {
  if (Number.isNaN(value)) return 'NaN';
  if (value === Number.POSITIVE_INFINITY) return '+Inf';
  if (value === Number.NEGATIVE_INFINITY) return '-Inf';
  return String(value);
}

function labelText(names: readonly string[], values: readonly string[], extra?: string): string {
  const parts = names.map((name, i) => `${name}="${escapeLabel(values[i] ?? '')}"`);
  if (extra !== undefined) parts.push(extra);
  return parts.length === 0 ? '' : `{${parts.join(',')}}`;
}

interface Metric {
  readonly name: string;
  render(out: string[]): void;
}

/** Series per label-value tuple, created on first use. */
abstract class Family<S> implements Metric {
  private readonly series = new Map<string, { values: readonly string[]; series: S }>();

  constructor(
    readonly name: string,
    protected readonly help: string,
    protected readonly type: 'counter' | 'gauge' | 'histogram',
    protected readonly labelNames: readonly string[],
  ) {}

  /** The series for these label values (in labelNames order); keep it to skip the lookup next time. */
  labels(...values: string[]): S {
    if (values.length !== this.labelNames.length) throw new Error(`${this.name} takes ${this.labelNames.length} label values, got ${values.length}`);
    const id = values.join('\u0000');
    let entry = this.series.get(id);
    if (entry === undefined) {
      entry = { values, series: this.create() };
      this.series.set(id, entry);
    }
    return entry.series;
  }

  render(out: string[]): void {
    out.push(`# HELP ${this.name} ${escapeHelp(this.help)}`, `# TYPE ${this.name} ${this.type}`);
    for (const { values, series } of this.series.values()) this.renderSeries(out, values, series);
  }

  protected abstract create(): S;
  protected abstract renderSeries(out: string[], values: readonly string[], series: S): void;
}

export class CounterSeries {
  value = 0;
  inc(by = 1): void {
    this.value += by;
  }
}

export class Counter extends Family<CounterSeries> {
  constructor(name: string, help: string, labelNames: readonly string[] = []) {
    super(name, help, 'counter', labelNames);
  }
  protected create(): CounterSeries {
    return new CounterSeries();
  }
  protected renderSeries(out: string[], values: readonly string[], series: CounterSeries): void {
    out.push(`${this.name}${labelText(this.labelNames, values)} ${formatNumber(series.value)}`);
  }
}

export class GaugeSeries {
  value = 0;
  set(value: number): void {
    this.value = value;
  }
  inc(by = 1): void {
    this.value += by;
  }
  dec(by = 1): void {
    this.value -= by;
  }
}

/** A gauge; with `read`, an unlabelled one whose value is read at scrape time. */
export class Gauge extends Family<GaugeSeries> {
  constructor(name: string, help: string, labelNames: readonly string[] = [], private readonly read?: () => number) {
    super(name, help, 'gauge', labelNames);
    if (read !== undefined && labelNames.length > 0) throw new Error(`${name}: a read-at-scrape gauge has no labels`);
  }
  override render(out: string[]): void {
    if (this.read !== undefined) this.labels().set(this.read());
    super.render(out);
  }
  protected create(): GaugeSeries {
    return new GaugeSeries();
  }
  protected renderSeries(out: string[], values: readonly string[], series: GaugeSeries): void {
    out.push(`${this.name}${labelText(this.labelNames, values)} ${formatNumber(series.value)}`);
  }
}

/**
 * A labelled gauge whose series are all read at scrape time: what `collect` yields then is the whole
 * family, so a series it no longer yields is gone (no value left behind by a change missed).
 */
export class CollectedGauge implements Metric {
  constructor(
    readonly name: string,
    private readonly help: string,
    private readonly labelNames: readonly string[],
    private readonly collect: () => Iterable<readonly [values: readonly string[], value: number]>,
  ) {}
  render(out: string[]): void {
    out.push(`# HELP ${this.name} ${escapeHelp(this.help)}`, `# TYPE ${this.name} gauge`);
    for (const [values, value] of this.collect()) out.push(`${this.name}${labelText(this.labelNames, values)} ${formatNumber(value)}`);
  }
}

export class HistogramSeries {
  /** Per-bucket (not cumulative) counts; the last slot is +Inf. */
  readonly counts: Float64Array;
  sum = 0;
  count = 0;
  constructor(private readonly bounds: readonly number[]) {
    this.counts = new Float64Array(bounds.length + 1);
  }
  observe(value: number): void {
    let i = 0;
    while (i < this.bounds.length && value > (this.bounds[i] as number)) i++;
    this.counts[i] = (this.counts[i] ?? 0) + 1;
    this.sum += value;
    this.count += 1;
  }
}

export class Histogram extends Family<HistogramSeries> {
  private readonly bounds: readonly number[];
  constructor(name: string, help: string, labelNames: readonly string[], bounds: readonly number[]) {
    super(name, help, 'histogram', labelNames);
    this.bounds = [...bounds].sort((a, b) => a - b);
  }
  protected create(): HistogramSeries {
    return new HistogramSeries(this.bounds);
  }
  protected renderSeries(out: string[], values: readonly string[], series: HistogramSeries): void {
    let cumulative = 0;
    for (let i = 0; i <= this.bounds.length; i++) {
      cumulative += series.counts[i] ?? 0;
      const le = i < this.bounds.length ? formatNumber(this.bounds[i] as number) : '+Inf';
      out.push(`${this.name}_bucket${labelText(this.labelNames, values, `le="${le}"`)} ${formatNumber(cumulative)}`);
    }
    out.push(`${this.name}_sum${labelText(this.labelNames, values)} ${formatNumber(series.sum)}`);
    out.push(`${this.name}_count${labelText(this.labelNames, values)} ${formatNumber(series.count)}`);
  }
}

export class Registry {
  private readonly metrics: Metric[] = [];

  register<M extends Metric>(metric: M): M {
    if (this.metrics.some((m) => m.name === metric.name)) throw new Error(`metric ${metric.name} is registered twice`);
    this.metrics.push(metric);
    return metric;
  }

  /** Every metric in the text exposition format, ending in a newline. */
  render(): string {
    const out: string[] = [];
    for (const metric of this.metrics) metric.render(out);
    return `${out.join('\n')}\n`;
  }
}
