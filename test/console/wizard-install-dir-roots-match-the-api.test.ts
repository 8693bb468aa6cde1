// The Add node wizard judges the install dir in the browser before the API does (add-node.js keeps
// its own copy: the console's files are plain JavaScript, served as they are). Every dir under a
// root the API refuses is refused by the wizard in the API's words, so the wizard never lets
// through what the create call would only refuse at its last step.
import t from 'tap';
import { FORBIDDEN_INSTALL_ROOTS } from '../../proto/src/install-dir-rules.js';
import { installDirProblem as apiInstallDirProblem } from '../../control-plane/src/nodes/node-validation.js';
// @ts-expect-error: plain JavaScript module of the console, no types
import { installDirProblem as wizardInstallDirProblem } from '../../control-plane/src/console/ui/pages/add-node.js';

const wizard = wizardInstallDirProblem as (value: string) => string | undefined;

t.test('every forbidden root is refused by the wizard as the API refuses it, two levels deep too', async (t) => {
  for (const root of FORBIDDEN_INSTALL_ROOTS) {
    for (const dir of [`${root}/zenova-node`, `${root}/a/zenova-node`]) {
      const api = apiInstallDirProblem(dir);
      t.ok(api !== undefined, `${dir}: the API refuses it`);
      t.equal(wizard(dir), api, `${dir}: the wizard in the API's words`);
    }
  }
});

t.test('dirs the API accepts the wizard accepts', async (t) => {
  for (const dir of ['/opt/zenova-node', '/data/zenova-node', '/runner/zenova-node', '/devices/zenova-node', '/srv/sysdata/node']) {
    t.equal(apiInstallDirProblem(dir), undefined, `${dir}: the API accepts it`);
    t.equal(wizard(dir), undefined, `${dir}: so does the wizard`);
  }
});
