/**
 * The product version both sides report (the node in enrollment and Hello, the control plane in
 * its version API and upgrade checks), from the repository's package.json: found by walking up
 * from this file, so it works from the source tree (tsx) and from a build that ships package.json
 * at its root.
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const PRODUCT_NAME = 'zenova-gateway';

let cached: string | undefined;

export function productVersion(): string {
  if (cached !== undefined) return cached;
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const candidate = path.join(dir, 'package.json');
    if (existsSync(candidate)) {
      const pkg = JSON.parse(readFileSync(candidate, 'utf8')) as { name?: unknown; version?: unknown };
      if (pkg.name === PRODUCT_NAME && typeof pkg.version === 'string') {
        cached = pkg.version;
        return cached;
      }
    }
    const parent = path.dirname(dir);
    if (parent === dir) throw new Error(`no package.json named ${PRODUCT_NAME} above ${fileURLToPath(import.meta.url)}`);
    dir = parent;
  }
}
