/**
 * `#/nodes/.` and `#/nodes/..`: URL parsing resolves "." and ".." (even %-encoded) as steps up a
 * path, so asking the API for such a node would ask for another route (/api/v1/nodes or
 * /api/v1/). No node has such a name: the detail says so without asking.
 */
import t from 'tap';
import { launchChromium, loginPage, startConsoleStack } from './browser-harness.js';

const browser = await launchChromium(t);
const stack = await startConsoleStack(t);

for (const [hash, name] of [['#/nodes/..', '..'], ['#/nodes/.', '.'], ['#/nodes/%2E%2E', '..']] as const) {
  t.test(`${hash} says there is no node named '${name}' and asks the API nothing for it`, async (t) => {
    const page = await loginPage(t, stack, browser);
    await page.getByTestId('nodes-empty').waitFor();
    const asked: string[] = [];
    page.on('request', (request) => {
      const path = new URL(request.url()).pathname;
      if (path.startsWith('/api/')) asked.push(`${request.method()} ${path}`);
    });
    await page.evaluate((h) => { (globalThis as unknown as { location: { hash: string } }).location.hash = h; }, hash);
    await page.getByRole('heading', { name: `Node ${name}` }).waitFor();
    const banner = page.getByTestId('error');
    await banner.waitFor();
    t.equal(await banner.textContent(), `No node named '${name}'.`, 'the detail says there is no such node');
    t.same(asked, [], 'no API request');
    t.same(page.problems, [], 'no console errors or CSP violations');
  });
}
