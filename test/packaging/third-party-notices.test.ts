/**
 * THIRD-PARTY-NOTICES from a fake node_modules tree: every package with its name, version, license
 * field and the full text of its license files, in one order whatever order the dirs come in; a
 * package without a license file is listed with its license field and reported.
 */
import t from 'tap';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { packageDirOf, thirdPartyNotices } from '../../packaging/third-party-notices.js';

function fakePackage(dir: string, pkg: object, files: Record<string, string>): string {
  mkdirSync(dir, { recursive: true });
  writeFileSync(path.join(dir, 'package.json'), JSON.stringify(pkg));
  for (const [name, text] of Object.entries(files)) writeFileSync(path.join(dir, name), text);
  return dir;
}

t.test('the notices quote every license file of every package, sorted, and flag a package without one', async (t) => {
  const root = path.join(t.testdir({}), 'node_modules');
  const zeta = fakePackage(path.join(root, 'zeta'), { name: 'zeta', version: '1.0.0', license: 'MIT' }, {
    'LICENSE': 'MIT License\r\n\r\nCopyright (c) Zeta Authors\r\n',
    'NOTICE.md': 'Zeta includes parts of Omega.\n',
    'README.md': 'not a license\n',
    'index.js': 'module.exports = 1;\n',
  });
  const alpha = fakePackage(path.join(root, '@scope', 'alpha'), { name: '@scope/alpha', version: '2.0.0', license: { type: 'Apache-2.0' } }, { 'LICENCE.txt': 'Apache License 2.0 text\n' });
  const beta = fakePackage(path.join(zeta, 'node_modules', 'beta'), { name: 'beta', version: '0.1.0', licenses: [{ type: 'BSD-3-Clause' }] }, { 'index.js': '' });

  const notices = thirdPartyNotices([zeta, beta, alpha, zeta]);
  t.same(notices.packages.map((p) => `${p.name} ${p.version} ${p.license} ${p.texts.map((x) => x.file).join(',')}`), [
    '@scope/alpha 2.0.0 Apache-2.0 LICENCE.txt',
    'beta 0.1.0 BSD-3-Clause ',
    'zeta 1.0.0 MIT LICENSE,NOTICE.md',
  ]);
  t.same(notices.withoutLicenseFile, ['beta@0.1.0'], 'the package without a license file is reported');
  t.match(notices.text, '  beta 0.1.0 (BSD-3-Clause) [no license file in the package]');
  t.match(notices.text, 'zeta 1.0.0\nLicense: MIT\n\n--- LICENSE ---\n\nMIT License\n\nCopyright (c) Zeta Authors\n\n--- NOTICE.md ---\n\nZeta includes parts of Omega.\n');
  t.notMatch(notices.text, 'not a license', 'a README is not a license file');
  t.notMatch(notices.text, '\r', 'line ends are normalised');
  t.notMatch(notices.text, root, 'no build machine path is written');
  t.equal(thirdPartyNotices([alpha, beta, zeta]).text, notices.text, 'the same packages in another order give the same bytes');
});

t.test('a file inside node_modules belongs to the package after the last node_modules', async (t) => {
  t.equal(packageDirOf('/r/node_modules/fastify/lib/route.js'), '/r/node_modules/fastify');
  t.equal(packageDirOf('/r/node_modules/@grpc/grpc-js/build/src/index.js'), '/r/node_modules/@grpc/grpc-js');
  t.equal(packageDirOf('/r/node_modules/ajv/node_modules/fast-uri/index.js'), '/r/node_modules/ajv/node_modules/fast-uri');
  t.equal(packageDirOf('/r/edge-node/src/main.ts'), undefined);
});
