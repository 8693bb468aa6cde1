/**
 * What goes into a node release (the .zpkg) and into the installer tarball, as lists of files with
 * their modes. Release layout (unpacked by the installer into releases/<version>/):
 *
 *   bin/zenova-node                    launcher systemd runs: the carried node + the daemon bundle
 *   bin/zenova                         the host CLI, same runtime
 *   runtime/bin/node, runtime/LICENSE  the Node runtime (npm node-linux-<cpu>@22)
 *   app/package.json                   name + version (edge-node's productVersion() reads it)
 *   app/edge-node/zenova-node.mjs      the node daemon, bundled
 *   app/installer/zenova.mjs           the CLI, bundled
 *   app/node_modules/…                 better-sqlite3 rebuilt for the runtime, bindings, file-uri-to-path
 *   share/systemd/*.service            the units the installer writes, rendered for /opt/zenova-node
 *   release-signing-key.pub.pem        the key the bundled CLI trusts (../../ from its file)
 *   THIRD-PARTY-NOTICES                the npm packages in app/ with their license texts
 */
import { installLayout } from '../installer/src/install/install-layout.js';
import { DEFAULT_INSTALL_DIR } from '../installer/src/install/install-dir-rules.js';
import { nodeEdgeUnit, updaterUnit } from '../installer/src/install/unit-files.js';
import type { PackageEntry } from './zpkg/write-package.js';
import type { AppBundle } from './bundle-apps.js';
import type { NativeModuleFiles } from './native-modules.js';
import type { NodeRuntime } from './node-runtime.js';
import { NOTICES_FILE } from './third-party-notices.js';
import path from 'node:path';

/**
 * A POSIX sh launcher: resolves its own real location, so it works through the `current` symlink.
 * `--` ends Node's own options: without it Node takes an `--env-file F` meant for the CLI (after
 * the script's name) as its own, and exits 9 with "node: F: not found" when F is missing.
 */
function launcher(bundle: string, rootFromBin: string): Buffer {
  return Buffer.from(`#!/bin/sh
# Runs the Node runtime carried by this release; the host needs no Node of its own.
here=$(dirname "$(readlink -f "$0")")
root=$(cd "$here/${rootFromBin}" && pwd -P)
exec "$root/runtime/bin/node" -- "$root/${bundle}" "$@"
`);
}

export interface ReleaseParts {
  version: string;
  runtime: NodeRuntime;
  apps: { node: AppBundle; cli: AppBundle };
  native: NativeModuleFiles;
  publicKeyPem: string;
  /** THIRD-PARTY-NOTICES' text (third-party-notices.ts). */
  notices: string;
}

export function appPackageJson(version: string): Buffer {
  // "zenova-gateway" is what productVersion() looks for; type module makes the .mjs bundles' siblings ESM too.
  return Buffer.from(`${JSON.stringify({ name: 'zenova-gateway', version, private: true, type: 'module' }, null, 2)}\n`);
}

function commonEntries(parts: ReleaseParts): PackageEntry[] {
  return [
    { path: 'runtime/bin/node', mode: 0o755, content: { file: parts.runtime.binary } },
    { path: 'runtime/LICENSE', mode: 0o644, content: { file: path.join(parts.runtime.dir, 'LICENSE') } },
    { path: 'app/package.json', mode: 0o644, content: appPackageJson(parts.version) },
    { path: parts.apps.cli.path, mode: 0o644, content: parts.apps.cli.contents },
    ...parts.native.files.map((f) => ({ path: `app/node_modules/${f.path}`, mode: f.path.endsWith('.node') ? 0o755 : 0o644, content: { file: f.source } })),
    { path: 'release-signing-key.pub.pem', mode: 0o644, content: Buffer.from(parts.publicKeyPem) },
    { path: NOTICES_FILE, mode: 0o644, content: Buffer.from(parts.notices) },
  ];
}

/** The files of the .zpkg, in manifest order. */
export function releaseEntries(parts: ReleaseParts): PackageEntry[] {
  const layout = installLayout(DEFAULT_INSTALL_DIR);
  return [
    { path: 'bin/zenova-node', mode: 0o755, content: launcher(parts.apps.node.path, '..') },
    { path: 'bin/zenova', mode: 0o755, content: launcher(parts.apps.cli.path, '..') },
    { path: parts.apps.node.path, mode: 0o644, content: parts.apps.node.contents },
    ...commonEntries(parts),
    { path: 'share/systemd/node-edge.service', mode: 0o644, content: Buffer.from(nodeEdgeUnit(layout)) },
    { path: 'share/systemd/zenova-node-update.service', mode: 0o644, content: Buffer.from(updaterUnit(layout)) },
  ];
}

/** The files of the installer tarball, at its top level (no top dir): `zenova`, the same runtime. */
export function installerEntries(parts: ReleaseParts): PackageEntry[] {
  return [{ path: 'zenova', mode: 0o755, content: launcher(parts.apps.cli.path, '.') }, ...commonEntries(parts)];
}
