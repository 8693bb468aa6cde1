/**
 * What is built from a tool server's key (its prefilter, its forms' pattern) is built on the key's
 * first use and kept: keys are few, so all are dropped at once past MAX_KEPT rather than tracked.
 */
const MAX_KEPT = 256;

/** `build`, built once per key. */
export function builtPerKey<T>(build: (secret: string) => T): (secret: string) => T {
  const built = new Map<string, T>();
  return (secret) => {
    let value = built.get(secret);
    if (value === undefined) {
      if (built.size >= MAX_KEPT) built.clear();
      value = build(secret);
      built.set(secret, value);
    }
    return value;
  };
}
