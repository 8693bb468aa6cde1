// The re-enroll advice of a refusal named only the installer (`zenova install node … --reenroll`);
// a node run without the installer re-enrolls with `zenova-node enroll --reenroll --token-file …`
// (node-api.md). Every hint that says to re-enroll names both.
import t from 'tap';
import { refusalHint } from '../../proto/src/refusal-codes.js';
import type { RefusalCode } from '../../proto/src/refusal-codes.js';

const REENROLLED: RefusalCode[] = ['NODE_DELETED', 'CREDENTIAL_INVALID', 'CREDENTIAL_EXPIRED', 'CREDENTIAL_REVOKED', 'CREDENTIAL_SUPERSEDED'];

t.test('each re-enroll hint names the installer form and the zenova-node form', async (t) => {
  for (const code of REENROLLED) {
    const hint = refusalHint(code);
    t.match(hint, /`zenova gateway-node reenroll-command NAME`/, `${code}: where the token comes from`);
    t.match(hint, /`zenova install node … --reenroll`/, `${code}: an installed node`);
    t.match(hint, /`zenova-node enroll --reenroll --token-file FILE …` with its token for a node run without the installer/, `${code}: a node run without the installer`);
  }
});

t.test('the deleted node hint still says the reenroll moves the old node aside, whichever form runs it', async (t) => {
  t.match(refusalHint('NODE_DELETED'), /zenova-node enroll --reenroll .*\), which moves the old node's spool and config aside \(kept in the state dir's retired\/ directory/);
});
