// Test dirs outlive the teardowns that stop what runs in them, and are removed when the test
// process exits: its own, never another test file's.
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import t from 'tap';

const run = promisify(execFile);
const repo = path.resolve(import.meta.dirname, '../..');
const preload = path.join(repo, 'test/fixtures/test-dirs-removed-at-exit.ts');

t.test("a test process removes its own fixture dirs when it exits and leaves another file's", async (t) => {
  const root = t.testdir({ test: { 'a.test.ts': '' } });
  const fixtures = path.join(root, '.tap/fixtures');
  const own = path.join(fixtures, 'test-a.test.ts-some-test');
  const ownTop = path.join(fixtures, 'test-a.test.ts');
  const other = path.join(fixtures, 'test-ab.test.ts-some-test');
  for (const dir of [own, ownTop, other]) {
    mkdirSync(dir, { recursive: true });
    writeFileSync(path.join(dir, 'state.sqlite'), 'x');
  }
  await run(process.execPath, ['--import=tsx', `--import=${preload}`, path.join(root, 'test/a.test.ts')], { cwd: repo, env: { ...process.env, TAP_CWD: root } });
  t.notOk(existsSync(own), "its subtest's dir is gone");
  t.notOk(existsSync(ownTop), 'its top-level dir is gone');
  t.ok(existsSync(other), "another file's dir is kept");
});

t.test("under this project's tap config a teardown still finds its test dir", async (t) => {
  // A scratch test file inside the checkout (so it resolves tap), in a dir tap ignores.
  const scratch = t.testdir({
    'teardown-order.test.ts': [
      "import { existsSync } from 'node:fs';",
      "import t from 'tap';",
      "t.test('inner', async (t) => {",
      "  const dir = t.testdir({ f: 'x' });",
      "  t.teardown(() => { console.log(`teardown-sees-dir=${existsSync(dir)}`); });",
      '  t.pass();',
      '});',
    ].join('\n'),
  });
  const file = path.join(scratch, 'teardown-order.test.ts');
  const { stdout } = await run(path.join(repo, 'node_modules/.bin/tap'), ['-R', 'tap', file], { cwd: repo });
  t.match(stdout, /teardown-sees-dir=true/, 'the dir is there when the teardown runs');
});
