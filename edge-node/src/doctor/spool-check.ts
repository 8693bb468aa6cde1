/**
 * doctor's look at the request spool: the checks `serve` makes before it opens spool.db (its
 * marker, the file's presence, a lost spool's leftover -wal/-shm, access, header, WAL, whether the
 * WAL is this spool.db's, and meta: vetSpoolFile), so a spool serve would refuse to start with
 * fails here too, with serve's message. A spool a running
 * node-edge holds open is not read: that process opened it already, and vetting it under live
 * writes proves nothing more.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { checkAgainstMarker, missingSpoolRefusal } from '../spool/open-node-spool.js';
import {
  checkSpoolFileAccess,
  findSpoolWalShortfall,
  leftoverSidecarsRefusal,
  leftoverSpoolSidecars,
  SPOOL_FILE,
  SpoolRefusedError,
  vetSpoolFile,
  WAL_SHORTFALL_ADVICE,
} from '../spool/spool-file.js';
import { loadSpoolMarker } from '../spool/spool-marker.js';
import type { SpoolMarker } from '../spool/spool-marker.js';
import { isSpoolHeldOpen } from '../spool/spool-owner-lock.js';
import { StateFileError } from '../state/state-store.js';
import type { StateStore } from '../state/state-store.js';
import type { DoctorCheck } from './doctor.js';

const REFUSED = '`serve` refuses to start with it: ';

export async function checkSpool(store: StateStore, nodeId: string): Promise<DoctorCheck> {
  const file = path.join(store.dir, SPOOL_FILE);
  let marker: SpoolMarker | undefined;
  try {
    marker = await loadSpoolMarker(store);
  } catch (err) {
    if (!(err instanceof StateFileError)) throw err;
    return { ok: false, label: 'request spool marker', advice: `${REFUSED}${err.message}` };
  }
  // Before spool.db, as createSpoolFile looks (a node-edge may be creating it meanwhile).
  const leftovers = leftoverSpoolSidecars(file);
  if (!existsSync(file)) {
    if (marker === undefined && leftovers.length > 0) {
      return { ok: false, label: `request spool ${file}`, advice: `${REFUSED}${leftoverSidecarsRefusal(file, leftovers).message}` };
    }
    if (marker === undefined) return { ok: true, label: 'request spool: none yet (node-edge creates spool.db at its first start)' };
    return { ok: false, label: `request spool ${file}`, advice: `${REFUSED}${missingSpoolRefusal(store, file, marker).message}` };
  }
  if (isSpoolHeldOpen(file)) return { ok: true, label: `request spool ${file} (open in the running node-edge)` };
  try {
    checkSpoolFileAccess(file);
    // Answered records lost with the WAL: serve starts (and logs it), but doctor fails, and does not
    // open the spool, whose first connection would rebuild the -shm that is the only trace of it.
    const shortfall = findSpoolWalShortfall(file);
    if (shortfall !== null) return { ok: false, label: `request spool ${file}`, advice: `${file} ${shortfall}; ${WAL_SHORTFALL_ADVICE}` };
    const meta = vetSpoolFile(file, nodeId);
    // Another spool, or an older copy of this one (a backup put back): serve's refusal, as serve words it.
    checkAgainstMarker(store, file, meta, marker);
    return { ok: true, label: `request spool ${file}: spool ${meta.spoolId}, readable` };
  } catch (err) {
    const why = err instanceof SpoolRefusedError || err instanceof StateFileError ? err.message : `${file}: cannot be read (${(err as Error).message})`;
    return { ok: false, label: `request spool ${file}`, advice: `${REFUSED}${why}` };
  }
}
