/**
 * Every install-dir rule of seed 004 §9.2 is refused by `zenova install node` before any write,
 * with its code, and the installer's rules agree with the control plane's (the console validates
 * the same field when a node is created).
 */
import t from 'tap';
import { chmodSync, chownSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { installDirProblem } from '../../installer/src/install/install-dir-rules.js';
import { installDirProblem as controlPlaneRule } from '../../control-plane/src/nodes/node-validation.js';
import { FORBIDDEN_INSTALL_ROOTS, forbiddenInstallRootRule } from '../../proto/src/install-dir-rules.js';
import { runInstall } from '../../installer/src/commands/install.js';
import { buildNodePackage, releaseKeys } from './package-builder.js';
import { captureCli, hostEnv, listTree } from './fake-host.js';

const CASES: Array<[string, string | undefined]> = [
  ['/opt/zenova-node', undefined],
  ['/data/zenova-node', undefined],
  ['/srv/nodes/edge-1_a.b', undefined],
  ['/opt/zenova-node/', undefined],
  ['opt/zenova-node', 'NODE-DIR-FORMAT'],
  ['/zenova', 'NODE-DIR-FORMAT'],
  ['/opt/zenova node', 'NODE-DIR-FORMAT'],
  ['/opt/zenova$node', 'NODE-DIR-FORMAT'],
  ['/opt//zenova-node', 'NODE-DIR-FORMAT'],
  ['/opt/../zenova-node', 'NODE-DIR-FORMAT'],
  [`/opt/${'x'.repeat(260)}`, 'NODE-DIR-FORMAT'],
  ['/opt/zenova', 'NODE-DIR-CENTRAL'],
  ['/opt/zenova/node', 'NODE-DIR-CENTRAL'],
  ['/tmp/zenova-node', 'NODE-DIR-FORBIDDEN'],
  ['/var/tmp/zenova-node', 'NODE-DIR-FORBIDDEN'],
  ['/home/ops/zenova-node', 'NODE-DIR-FORBIDDEN'],
  ['/root/zenova-node', 'NODE-DIR-FORBIDDEN'],
  ['/run/user/0/zenova-node', 'NODE-DIR-FORBIDDEN'],
  ['/usr/local/zenova-node', 'NODE-DIR-FORBIDDEN'],
  ['/etc/zenova-node', 'NODE-DIR-FORBIDDEN'],
  ['/boot/zenova-node', 'NODE-DIR-FORBIDDEN'],
];

t.test('each §9.2 install-dir rule gives its code, and the control plane judges every case the same', async (t) => {
  for (const [dir, code] of CASES) {
    t.equal(installDirProblem(dir)?.code, code, `${dir.slice(0, 40)} → ${code ?? 'ok'}`);
    t.equal(controlPlaneRule(dir) === undefined, code === undefined, `control plane agrees on ${dir.slice(0, 40)}`);
  }
});

t.test('every forbidden root is refused by both sides with the one rule they share (proto/src/install-dir-rules.ts)', async (t) => {
  for (const root of FORBIDDEN_INSTALL_ROOTS) {
    for (const dir of [`${root}/zenova-node`, `${root}/a/b/zenova-node`]) {
      const rule = forbiddenInstallRootRule(dir);
      t.match(rule, /^must not be under \//, `${dir}: refused`);
      t.same(installDirProblem(dir), { code: 'NODE-DIR-FORBIDDEN', rule }, `installer: ${dir}`);
      t.equal(controlPlaneRule(dir), rule, `control plane: ${dir}`);
    }
    // `/runx` is not under `/run` (`/run/userx` is under `/run`, though, and said so).
    t.notMatch(forbiddenInstallRootRule(`${root}x/zenova-node`) ?? '', new RegExp(`^must not be under ${root}(?: |$)`), `${root}x/zenova-node is not under ${root}`);
  }
});

t.test('the installer refuses a bad --install-dir before writing anything, naming the rule', async (t) => {
  const keys = releaseKeys();
  const root = mkdtempSync(join(tmpdir(), 'zn-dir-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const work = mkdtempSync(join(tmpdir(), 'zn-dir-work-'));
  t.teardown(() => rmSync(work, { recursive: true, force: true }));
  const pkg = await buildNodePackage(work, keys);
  for (const [dir, code] of CASES.filter(([, c]) => c !== undefined)) {
    const host = hostEnv(root, { keyPem: keys.publicKeyPem });
    const before = listTree(root);
    const cli = captureCli(work);
    const exit = await runInstall(['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--token', 'tok_abc', '--install-dir', dir], cli.ctx, host);
    t.equal(exit, 1, `${dir.slice(0, 40)} refused`);
    t.match(cli.out(), new RegExp(`✗ ${code}: install dir`), `${dir.slice(0, 40)} reported as ${code}`);
    t.match(cli.out(), /nothing was written/);
    t.same(listTree(root), before, 'nothing written');
  }
});

t.test('an install dir whose symbolic links lead under a forbidden root or the central install is refused like that dir', async (t) => {
  const keys = releaseKeys();
  const work = mkdtempSync(join(tmpdir(), 'zn-dir-work-'));
  t.teardown(() => rmSync(work, { recursive: true, force: true }));
  const pkg = await buildNodePackage(work, keys);
  const cases: Array<{ link: string; target: string; dir: string; code: string | undefined; leadsTo?: string }> = [
    { link: 'data', target: '/home/ops/data', dir: '/data/zenova-node', code: 'NODE-DIR-FORBIDDEN', leadsTo: '/home/ops/data/zenova-node' },
    { link: 'data', target: 'tmp/x', dir: '/data/zenova-node', code: 'NODE-DIR-FORBIDDEN', leadsTo: '/tmp/x/zenova-node' },
    { link: 'srv/node', target: '../opt/zenova/n', dir: '/srv/node', code: 'NODE-DIR-CENTRAL', leadsTo: '/opt/zenova/n' },
    // A link chain: /data → /mnt/d, /mnt/d → /var/tmp/d.
    { link: 'mnt/d', target: '/var/tmp/d', dir: '/data2/zenova-node', code: 'NODE-DIR-FORBIDDEN', leadsTo: '/var/tmp/d/zenova-node' },
    { link: 'data', target: '/srv/big-disk', dir: '/data/zenova-node', code: undefined },
    { link: 'data', target: '/data', dir: '/data/zenova-node', code: 'NODE-DIR-FORMAT' },
  ];
  for (const c of cases) {
    const root = mkdtempSync(join(tmpdir(), 'zn-dir-'));
    t.teardown(() => rmSync(root, { recursive: true, force: true }));
    mkdirSync(join(root, dirname(c.link)), { recursive: true });
    symlinkSync(c.target, join(root, c.link));
    if (c.dir === '/data2/zenova-node') symlinkSync('/mnt/d', join(root, 'data2'));
    if (c.target === '/srv/big-disk') mkdirSync(join(root, 'srv/big-disk'), { recursive: true });
    const host = hostEnv(root, { keyPem: keys.publicKeyPem });
    const before = listTree(root);
    const cli = captureCli(work);
    const exit = await runInstall(['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--token', 'tok_abc', '--install-dir', c.dir, '--check-only'], cli.ctx, host);
    const label = `${c.dir} with /${c.link} → ${c.target}`;
    if (c.code === undefined) {
      if (!t.equal(exit, 0, `${label} passes`)) t.comment(cli.out());
      continue;
    }
    t.equal(exit, 1, `${label} refused`);
    t.match(cli.out(), new RegExp(`✗ ${c.code}: install dir ${c.dir} `), `${label} reported as ${c.code}`);
    if (c.leadsTo !== undefined) t.match(cli.out(), `leads to ${c.leadsTo} through a symbolic link`, `${label} names where it leads`);
    t.same(listTree(root), before, 'nothing written');
  }
});

t.test('an install dir another user owns or may write, or one below such a dir, is refused (NODE-DIR-UNSAFE) before anything is written; a root-owned one passes', async (t) => {
  const keys = releaseKeys();
  const work = mkdtempSync(join(tmpdir(), 'zn-dir-work-'));
  t.teardown(() => rmSync(work, { recursive: true, force: true }));
  const pkg = await buildNodePackage(work, keys);
  const me = process.getuid?.() ?? 0;
  const other = me === 65534 ? 65533 : 65534;
  const cases: Array<{ what: string; prepare: (root: string) => void; reason: RegExp | undefined }> = [
    { what: 'a parent owned by another user', prepare: (root) => { mkdirSync(join(root, 'srv/app'), { recursive: true }); chownSync(join(root, 'srv/app'), other, other); }, reason: new RegExp(`/srv/app is owned by uid ${other}, not root`) },
    { what: 'the dir itself owned by another user', prepare: (root) => { mkdirSync(join(root, 'srv/app/zenova-node'), { recursive: true }); chownSync(join(root, 'srv/app/zenova-node'), other, other); }, reason: new RegExp(`/srv/app/zenova-node is owned by uid ${other}`) },
    { what: 'a parent every user may write', prepare: (root) => { mkdirSync(join(root, 'srv/app'), { recursive: true }); chmodSync(join(root, 'srv/app'), 0o777); }, reason: /\/srv\/app is writable by every user \(mode 0777\)/ },
    { what: 'a parent a group other than root may write', prepare: (root) => { mkdirSync(join(root, 'srv/app'), { recursive: true }); chownSync(join(root, 'srv/app'), me, 1000); chmodSync(join(root, 'srv/app'), 0o775); }, reason: /\/srv\/app is writable by group 1000/ },
    { what: 'a link leading to a dir another user owns', prepare: (root) => { mkdirSync(join(root, 'mnt/big'), { recursive: true }); chownSync(join(root, 'mnt/big'), other, other); mkdirSync(join(root, 'srv'), { recursive: true }); symlinkSync('/mnt/big', join(root, 'srv/app')); }, reason: new RegExp(`/mnt/big is owned by uid ${other}`) },
    { what: 'a sticky parent every user may write', prepare: (root) => { mkdirSync(join(root, 'srv/app'), { recursive: true }); chmodSync(join(root, 'srv/app'), 0o1777); }, reason: undefined },
    { what: 'root-owned parents', prepare: (root) => { mkdirSync(join(root, 'srv/app'), { recursive: true, mode: 0o755 }); }, reason: undefined },
  ];
  for (const c of cases) {
    const root = mkdtempSync(join(tmpdir(), 'zn-dir-own-'));
    t.teardown(() => rmSync(root, { recursive: true, force: true }));
    c.prepare(root);
    const host = hostEnv(root, { keyPem: keys.publicKeyPem });
    const before = listTree(root);
    const cli = captureCli(work);
    const exit = await runInstall(['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--install-dir', '/srv/app/zenova-node', '--check-only'], cli.ctx, host);
    if (c.reason === undefined) {
      t.notMatch(cli.out(), /NODE-DIR-UNSAFE/, `${c.what}: passes`);
      t.equal(exit, 0, `${c.what}: the checks pass`);
    } else {
      t.equal(exit, 1, `${c.what}: refused`);
      t.match(cli.out(), /✗ NODE-DIR-UNSAFE: /, `${c.what}: NODE-DIR-UNSAFE`);
      t.match(cli.out(), c.reason, `${c.what}: names the dir and why`);
    }
    t.same(listTree(root), before, `${c.what}: nothing written`);
  }
});
