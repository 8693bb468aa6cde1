/**
 * The release signing public key this installer trusts. It ships beside the installer as
 * `installer/release-signing-key.pub.pem` (the packaging step puts it there; docs/install.md says
 * how the key pair is made). No environment variable or option can replace it: trust comes with
 * the installer, never from the command line.
 */
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';

/** The key file as the operator finds it in the unpacked installer. */
export const RELEASE_KEY_NAME = 'installer/release-signing-key.pub.pem';
export const RELEASE_KEY_FILE = fileURLToPath(new URL('../../release-signing-key.pub.pem', import.meta.url));

/** The PEM, or undefined when this installer carries none (a development checkout). */
export async function loadReleasePublicKey(file = RELEASE_KEY_FILE): Promise<string | undefined> {
  try {
    return await readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}
