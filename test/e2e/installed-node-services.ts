/**
 * The fake service manager of the install e2e tests (no systemd here): `start` runs the real
 * `zenova-node serve` from the sources on the installed data dir, `stop` stops it. `refuses`
 * (checked at each start) makes the unit fail instead, as a release whose node-edge never starts.
 */
import type { Test } from 'tap';
import { join } from 'node:path';
import { startProcess, tsEntry } from '../fixtures/processes.js';
import type { StartedProcess } from '../fixtures/processes.js';
import { fakeServices } from '../installer/fake-host.js';
import type { FakeServices } from '../installer/fake-host.js';

export interface InstalledNodeServices {
  services: FakeServices;
  /** Every node-edge process started, in order. */
  started: StartedProcess[];
}

export function installedNodeServices(t: Test, opts: { root: string; dataDir: string; port: number; name: string; refuses?: () => boolean }): InstalledNodeServices {
  const started: StartedProcess[] = [];
  let node: StartedProcess | undefined;
  const services: FakeServices = fakeServices(opts.root, {
    onStart: async (unit) => {
      if (opts.refuses?.() === true) {
        services.states.set(unit, 'failed');
        return;
      }
      const { command, args } = tsEntry('edge-node/src/main.ts');
      node = await startProcess({
        name: opts.name,
        command,
        args: [...args, 'serve', '--state-dir', join(opts.root, opts.dataDir), '--listen', `127.0.0.1:${opts.port}`],
        env: { ZENOVA_NODE_RECONNECT_BASE_MS: '100', ZENOVA_NODE_RECONNECT_MAX_MS: '500' },
        t,
      });
      started.push(node);
    },
    onStop: async () => {
      await node?.stop();
      node = undefined;
    },
  });
  return { services, started };
}
