/**
 * The pieces of `--upgrade` that decide without a host: which release versions count as newer
 * (an upgrade never goes back), and the env file's version line replaced with every other line kept.
 */
import t from 'tap';
import { compareReleaseVersions } from '../../installer/src/install/installed-node.js';
import { withVersion } from '../../installer/src/install/upgrade-node.js';

t.test('release versions compare part by part as numbers, a pre-release before its release', async (t) => {
  t.equal(compareReleaseVersions('0.1.0', '0.0.9'), 1);
  t.equal(compareReleaseVersions('1.10.0', '1.9.3'), 1, '10 after 9, not before it as text would');
  t.equal(compareReleaseVersions('1.2', '1.2.0'), 0, 'a missing part counts as 0');
  t.equal(compareReleaseVersions('1.2.0-rc.1', '1.2.0'), -1);
  t.equal(compareReleaseVersions('1.2.0', '1.2.0-rc.1'), 1);
  t.equal(compareReleaseVersions('1.2.0-rc.1', '1.2.0-rc.2'), -1);
  t.equal(compareReleaseVersions('1.2.0+build.7', '1.2.0'), 0, 'build metadata does not order');
  t.equal(compareReleaseVersions('2.0.0', '10.0.0'), -1);
  t.equal(compareReleaseVersions('nightly', 'nightly'), 0);
  t.equal(compareReleaseVersions('nightly', '1.0.0'), undefined, 'no order between a name and a version');
});

t.test('pre-releases of one version are ordered as semver orders them, numeric identifiers as numbers', async (t) => {
  t.equal(compareReleaseVersions('1.2.0-rc.9', '1.2.0-rc.10'), -1, 'rc.10 after rc.9, not before it as text would');
  t.equal(compareReleaseVersions('1.2.0-rc.10', '1.2.0-rc.9'), 1);
  t.equal(compareReleaseVersions('1.2.0-beta.2', '1.2.0-beta.11'), -1);
  t.equal(compareReleaseVersions('1.2.0-beta.11', '1.2.0-beta.2'), 1);
  t.equal(compareReleaseVersions('1.2.0-rc.10', '1.2.0-rc.10'), 0);
  // The semver specification's own example chain (§11), each before the next and after every earlier one.
  const chain = ['1.0.0-alpha', '1.0.0-alpha.1', '1.0.0-alpha.beta', '1.0.0-beta', '1.0.0-beta.2', '1.0.0-beta.11', '1.0.0-rc.1', '1.0.0'];
  for (const [i, a] of chain.entries()) {
    for (const [j, b] of chain.entries()) t.equal(compareReleaseVersions(a, b), i < j ? -1 : i > j ? 1 : 0, `${a} vs ${b}`);
  }
});

t.test('the env file keeps every line but the version, which is replaced in place', async (t) => {
  const env = '# Written by `zenova install node`.\nZENOVA_NODE_LISTEN=0.0.0.0:7480\nZENOVA_NODE_VERSION=0.0.9\nZENOVA_CONTROL_PLANE_URL=https://cp\nHTTPS_PROXY=http://proxy:3128\n';
  t.equal(withVersion(env, '0.1.0'), env.replace('ZENOVA_NODE_VERSION=0.0.9', 'ZENOVA_NODE_VERSION=0.1.0'));
  t.equal(withVersion('ZENOVA_NODE_LISTEN=0.0.0.0:7480', '0.1.0'), 'ZENOVA_NODE_LISTEN=0.0.0.0:7480\nZENOVA_NODE_VERSION=0.1.0\n', 'added when missing');
});
