/**
 * A --control-plane URL whose port is out of range (`https://127.0.0.1:99999`) is named as such by
 * both CLIs: `zenova install node --check-only` (its NODE-CP-URL finding, from the control-plane
 * probe, which reuses enrollment's URL check) says what `zenova-node enroll` says, where the URL
 * parser alone would only call it "not a URL". Nothing is reached: the check refuses the URL first.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { parseControlPlaneUrl } from '../../edge-node/src/enroll/enroll.js';
import { runInstall } from '../../installer/src/commands/install.js';
import { probeControlPlane } from '../../installer/src/install/control-plane-probe.js';
import { runNodeCli } from '../edge-node/cli-capture.js';
import { captureCli, fakeServices, hostEnv } from './fake-host.js';

const TOKEN = 'zn_it_UG9ydE91dE9mUmFuZ2VUZXN0VG9rZW4wMTIzNDU2';

function freshRoot(): string {
  const root = mkdtempSync(join(tmpdir(), 'zn-cp-port-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  return root;
}

const CASES: Array<[string, string]> = [
  ['https://127.0.0.1:99999', '--control-plane has port 99999, out of range: a port is 1 to 65535'],
  ['https://[::1]:70000/', '--control-plane has port 70000, out of range: a port is 1 to 65535'],
  ['https://cp.example.test:0', '--control-plane has port 0, out of range: a port is 1 to 65535'],
];

t.test('install node --check-only names the port out of range in its NODE-CP-URL finding, as enroll does', async (t) => {
  for (const [url, words] of CASES) {
    const root = freshRoot();
    const cli = captureCli(root);
    // The real control-plane probe: the URL check it shares with enrollment is what is under test.
    const host = hostEnv(root, { services: fakeServices(root), probeControlPlane });
    const exit = await runInstall(['node', '--package', join(root, 'missing.zpkg'), '--control-plane', url, '--check-only'], cli.ctx, host);
    t.not(exit, 0, `${url}: the checks fail`);
    t.match(cli.out(), `✗ NODE-CP-URL: ${words}\n`, `${url}: the installer names the port`);
    t.notMatch(cli.out(), /NODE-CP-URL: --control-plane is not a URL/, `${url}: not "not a URL"`);

    const enroll = await runNodeCli(['enroll', '--control-plane', url, '--token', TOKEN, '--state-dir', join(root, 's')]);
    t.equal(enroll.code, 2, `${url}: enroll, exit 2`);
    t.match(enroll.stderr, `zenova-node: ${words}\n`, `${url}: enroll in the same words`);
  }
});

t.test('a port from 1 to 65535 passes the check', async (t) => {
  for (const url of ['https://cp.example.test:1', 'https://cp.example.test:65535/', 'https://[::1]:8443', 'https://cp.example.test']) {
    t.doesNotThrow(() => parseControlPlaneUrl(url), url);
  }
});
