/**
 * Which Node runs the gateways under test (node, floor, peer). `packaged` (the default) is the
 * runtime the package carries (npm `node-linux-<cpu>@22`, packaging/node-runtime.ts) with
 * better-sqlite3 rebuilt for it (packaging/native-modules.ts), laid out as an installed release's
 * app/ dir: the node as customers run it. `host` is the Node running the bench. Both come from the
 * package build's cache (.zenova/cache); on a fresh clone the first `packaged` run fetches the
 * runtime from the npm registry and compiles better-sqlite3 (a few minutes), as `npm run package`
 * does. The upstream and the load generator always run on the host's Node: they are not measured.
 */
import { cpSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { nativeModuleFiles } from '../../packaging/native-modules.js';
import { hostArch, nodeRuntime } from '../../packaging/node-runtime.js';
import { appPackageJson } from '../../packaging/release-contents.js';
import { productVersion } from '../../proto/src/product-version.js';
import { REPO_ROOT } from '../fixtures/processes.js';

export interface GatewayRuntime {
  name: 'packaged' | 'host';
  /** The node binary to run gateways with. */
  binary: string;
  /** e.g. v22.23.5 */
  version: string;
  /** Where the node's bundle goes: next to the node_modules (and package.json) it loads. */
  nodeBundleFile: string;
}

export async function gatewayRuntime(choice: string, workDir: string, log: (line: string) => void): Promise<GatewayRuntime> {
  if (choice === 'host') {
    // Under .zenova/bench/ in the repo, so it finds node_modules/better-sqlite3 and package.json.
    return { name: 'host', binary: process.execPath, version: process.version, nodeBundleFile: join(REPO_ROOT, '.zenova', 'bench', 'zenova-node.mjs') };
  }
  if (choice !== 'packaged') throw new Error(`BENCH_RUNTIME must be "packaged" or "host", got ${JSON.stringify(choice)}`);
  const arch = hostArch();
  if (arch === undefined) throw new Error(`no packaged runtime for ${process.arch}; run with BENCH_RUNTIME=host`);
  const cacheDir = join(REPO_ROOT, '.zenova', 'cache');
  const runtime = await nodeRuntime(cacheDir, arch, log);
  const native = await nativeModuleFiles(REPO_ROOT, cacheDir, runtime, log);
  const app = join(workDir, 'app');
  for (const f of native.files) {
    const to = join(app, 'node_modules', f.path);
    mkdirSync(dirname(to), { recursive: true });
    cpSync(f.source, to);
  }
  writeFileSync(join(app, 'package.json'), appPackageJson(productVersion()));
  return { name: 'packaged', binary: runtime.binary, version: `v${runtime.version}`, nodeBundleFile: join(app, 'edge-node', 'zenova-node.mjs') };
}
