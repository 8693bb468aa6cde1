// Plain-text tables for terminals: a header row, columns padded to their widest cell, two spaces apart.

export interface Column<Row> {
  header: string;
  cell(row: Row): string;
  /** Numbers read best right-aligned. */
  align?: 'left' | 'right';
}

export function renderTable<Row>(columns: ReadonlyArray<Column<Row>>, rows: readonly Row[]): string {
  const cells = rows.map((row) => columns.map((c) => c.cell(row)));
  const widths = columns.map((c, i) => Math.max(c.header.length, ...cells.map((r) => (r[i] ?? '').length)));
  const line = (values: readonly string[]): string =>
    values
      .map((v, i) => (columns[i]?.align === 'right' ? v.padStart(widths[i] ?? 0) : v.padEnd(widths[i] ?? 0)))
      .join('  ')
      .trimEnd();
  return [line(columns.map((c) => c.header)), ...cells.map(line)].join('\n') + '\n';
}

/** `label  value` lines with the labels padded to one width. */
export function renderFields(fields: ReadonlyArray<readonly [string, string]>, indent = '  '): string {
  const width = Math.max(...fields.map(([label]) => label.length));
  return fields.map(([label, value]) => `${indent}${label.padEnd(width)}  ${value}`.trimEnd()).join('\n') + '\n';
}
