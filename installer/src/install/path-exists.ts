// Whether a path exists (any kind of entry); errors such as EACCES count as "no", as a check would.
import { stat } from 'node:fs/promises';

export async function pathExists(file: string): Promise<boolean> {
  try {
    await stat(file);
    return true;
  } catch {
    return false;
  }
}
