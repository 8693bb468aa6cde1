// `ZENOVA_DEV_HOME=DIR npm start` writes DIR/dev.env, and its banner suggests
// `npm run zenova -- gateway-node list`: from the same shell the CLI must use that stack's dev.env,
// never the default .zenova/dev.env of another stack in the working directory.
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { ADMIN_TOKEN, startControlPlane, tempDir, zenova } from './gateway-node-harness.js';

const cp = await startControlPlane(t);

/** A working directory whose .zenova/dev.env names another stack, one that is not running. */
function cwdWithOtherStack(): string {
  const cwd = tempDir(t);
  mkdirSync(path.join(cwd, '.zenova'));
  writeFileSync(path.join(cwd, '.zenova', 'dev.env'), 'ZENOVA_CONTROL_PLANE_URL=http://127.0.0.1:1\nZENOVA_ADMIN_TOKEN=the-other-stacks-token\n');
  return cwd;
}

function writeDevEnv(devHome: string): void {
  mkdirSync(devHome, { recursive: true });
  writeFileSync(path.join(devHome, 'dev.env'), `ZENOVA_CONTROL_PLANE_URL=${cp.url}\nZENOVA_ADMIN_TOKEN=${ADMIN_TOKEN}\n`);
}

t.test("with ZENOVA_DEV_HOME set, gateway-node list uses that stack's dev.env, not the one in .zenova/", async (t) => {
  const cwd = cwdWithOtherStack();
  const devHome = tempDir(t, 'zenova-dev-home-');
  writeDevEnv(devHome);
  const result = await zenova(['gateway-node', 'list'], { env: { ZENOVA_DEV_HOME: devHome }, cwd });
  t.equal(result.code, 0, 'exits 0', { stderr: result.stderr });
  t.match(result.stdout, /No gateway nodes yet/, 'the control plane in that dev.env answered');
});

t.test('a relative ZENOVA_DEV_HOME is taken from the working directory, as npm start takes it', async (t) => {
  const cwd = cwdWithOtherStack();
  writeDevEnv(path.join(cwd, 'stacks', 'second'));
  const result = await zenova(['gateway-node', 'list'], { env: { ZENOVA_DEV_HOME: 'stacks/second' }, cwd });
  t.equal(result.code, 0, 'exits 0', { stderr: result.stderr });
  t.match(result.stdout, /No gateway nodes yet/, 'the control plane in that dev.env answered');
});

t.test('a ZENOVA_DEV_HOME without dev.env is named in the error and the default dev.env is not used instead', async (t) => {
  const cwd = cwdWithOtherStack();
  const devHome = tempDir(t, 'zenova-dev-home-');
  const result = await zenova(['gateway-node', 'list'], { env: { ZENOVA_DEV_HOME: devHome }, cwd });
  t.equal(result.code, 2, 'a usage error, not an attempt on the other stack', { stderr: result.stderr });
  const file = path.join(devHome, 'dev.env');
  t.ok(
    result.stderr.includes(`ZENOVA_CONTROL_PLANE_URL is not set (looked in the environment and ${file} (ZENOVA_DEV_HOME), which does not exist)`),
    'the error says which file it looked at',
    { stderr: result.stderr },
  );
  t.ok(result.stderr.includes(`the dev stack writes ${file}`), 'and where the dev stack writes it');
  t.notMatch(result.stderr, /127\.0\.0\.1:1|cannot reach/, 'the other stack is not contacted');
});

t.test('with ZENOVA_DEV_HOME unset, .zenova/dev.env in the working directory is still the default', async (t) => {
  const cwd = tempDir(t);
  writeDevEnv(path.join(cwd, '.zenova'));
  const result = await zenova(['gateway-node', 'list'], { env: {}, cwd });
  t.equal(result.code, 0, 'exits 0', { stderr: result.stderr });
});
