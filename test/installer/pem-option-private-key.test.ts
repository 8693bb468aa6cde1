// `zenova gateway-node create --ca-file F` sends the CA to the control plane, which puts it into
// install commands: a file holding a private key beside the certificate (a cert+key bundle) is
// refused on this host, before anything is sent, saying so and never quoting the key.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { UsageError } from '../../installer/src/cli-context.js';
import { readPemOption } from '../../installer/src/local-files.js';

const CERT = '-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ2VydA==\n-----END CERTIFICATE-----\n';
const KEY_BODY = 'MC4CAQAwBQYDK2VwBCIEIFNlY3JldEtleU5ldmVyU2VudA==';

t.test('a CA file with a private key beside its certificate is refused before anything is sent, naming the file, never the key', async (t) => {
  const dir = t.testdir({});
  for (const label of ['PRIVATE KEY', 'EC PRIVATE KEY', 'RSA PRIVATE KEY', 'ENCRYPTED PRIVATE KEY']) {
    const file = path.join(dir, 'bundle.pem');
    writeFileSync(file, `${CERT}-----BEGIN ${label}-----\n${KEY_BODY}\n-----END ${label}-----\n`);
    let thrown: unknown;
    try {
      readPemOption('bundle.pem', '--ca-file', dir, 'gateway-node create');
    } catch (err) {
      thrown = err;
    }
    t.type(thrown, UsageError, label);
    t.match((thrown as Error).message, /--ca-file bundle\.pem holds a private key beside its certificate: nothing was sent/, label);
    t.notMatch((thrown as Error).message, KEY_BODY, `${label}: the key is not quoted`);
  }
});

t.test('a CA file with certificates only is read as it is', async (t) => {
  const dir = t.testdir({ 'ca.pem': CERT + CERT });
  t.equal(readPemOption('ca.pem', '--ca-file', dir, 'gateway-node create'), CERT + CERT);
});
