// Human-readable figures for the node list and detail: bytes, ages, percentages, missing values.

export const MISSING = '-';

const BYTE_UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'] as const;

export function formatBytes(bytes: number | null | undefined): string {
  if (bytes === null || bytes === undefined) return MISSING;
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < BYTE_UNITS.length - 1) {
    value /= 1024;
    unit++;
  }
  const digits = unit === 0 || value >= 100 ? 0 : 1;
  return `${value.toFixed(digits)} ${BYTE_UNITS[unit]}`;
}

/** How long ago `iso` was, coarsely ("12s ago", "3m ago", "5h ago", "2d ago"); "never" for null. */
export function formatAge(iso: string | null | undefined, now: Date): string {
  if (iso === null || iso === undefined) return 'never';
  const then = Date.parse(iso);
  if (Number.isNaN(then)) return iso;
  const seconds = Math.max(0, Math.round((now.getTime() - then) / 1000));
  if (seconds < 60) return `${seconds}s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m ago`;
  if (seconds < 86_400) return `${Math.floor(seconds / 3600)}h ago`;
  return `${Math.floor(seconds / 86_400)}d ago`;
}

/** A 0..1 ratio as a percentage with one decimal. */
export function formatRatio(ratio: number | null | undefined): string {
  if (ratio === null || ratio === undefined) return MISSING;
  return `${(ratio * 100).toFixed(1)}%`;
}

export function formatCount(value: number | null | undefined): string {
  return value === null || value === undefined ? MISSING : String(value);
}

export function orMissing(value: string | null | undefined): string {
  return value === null || value === undefined || value === '' ? MISSING : value;
}

/**
 * A node's clock skew (its clock minus the control plane's, ms) as "+212 ms" / "-4 min 0 s"
 * (unsigned: "4 min 0 s"); "-" when no heartbeat measured it.
 */
export function formatSkew(skewMs: number | null | undefined, signed = true): string {
  if (skewMs === null || skewMs === undefined) return MISSING;
  const sign = signed ? (skewMs < 0 ? '-' : '+') : '';
  const abs = Math.abs(Math.round(skewMs));
  if (abs < 1000) return `${sign}${abs} ms`;
  const seconds = Math.round(abs / 1000);
  if (seconds < 60) return `${sign}${(abs / 1000).toFixed(1)} s`;
  const hours = Math.floor(seconds / 3600);
  const minutes = Math.floor((seconds % 3600) / 60);
  return hours > 0 ? `${sign}${hours} h ${minutes} min` : `${sign}${minutes} min ${seconds % 60} s`;
}
