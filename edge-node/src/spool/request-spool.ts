/**
 * The spool as the pipeline sees it (owned by the spool module; see docs/spool.md). A request
 * gets an open row when it is accepted, durable before anything is sent upstream, and its final
 * record before the caller gets the last byte.
 */
import type { RequestRecord } from '../../../proto/src/index.js';
import type { ApiKind, Surface } from '../pipeline/context.js';

/** What is known when a request is accepted (pre-authorised, about to be forwarded). */
export interface OpenRow {
  requestId: string;
  receivedAt: number;
  keyId: string | null;
  accountId: string | null;
  model: string | null;
  reservedMicros: number;
  leaseId: string | null;
  /**
   * What an 'interrupted' record (a crash while the request was open) reports; optional so the
   * opening stage may leave them out. Defaults: surface 'model', api 'chat.completions', stream
   * false, configVersion null.
   */
  api?: ApiKind;
  surface?: Surface;
  stream?: boolean;
  /** The caller's own id for the request, when it sent one. */
  clientRequestId?: string;
  configVersion?: number | null;
  /** Whether its model had a price (preauthorise decided); absent in rows of older releases. */
  priced?: boolean;
}

export interface RequestSpool {
  /**
   * Records that the request was accepted. Throws ZenovaError ZN_ERR_SPOOL_FULL when the spool is
   * full and the policy is `reject`. The row joins the next group commit; the promise returned
   * resolves once it is durable, and rejects with ZN_ERR_SPOOL_FULL if it cannot be written (the
   * request is then refused, not forwarded). void: nothing to wait for.
   */
  open(row: OpenRow): Promise<void> | void;
  /** The request's final record; resolves once it is durable. */
  finalise(record: RequestRecord): Promise<void>;
  /**
   * Registers how the request's final record is stamped again should its answer never go out
   * (pipeline/run-pipeline.ts): while that record still waits for its commit (the disk full),
   * stampUndelivered() replaces it with what `restamp` returns (undefined: kept), its queued bodies
   * kept. Returns the function that unregisters it, once the answer went out or the record is in.
   */
  onUndelivered?(requestId: string, restamp: () => RequestRecord | undefined): () => void;
  /**
   * The node's stop closed its callers' connections: the records still queued of requests that
   * registered onUndelivered are stamped again as those ask. close() does it too, before its last
   * commit. Returns how many were.
   */
  stampUndelivered?(): number;
  /** False when bodies are not kept (policy metering-only while full); refused requests keep fewer (pipeline/stages/spool.ts). */
  keepsBodies(): boolean;
  /**
   * How full the spool is: its bytes over its quota, 1 or more when full (either policy). The spool
   * stage reads it for the records of refused requests (pipeline/stages/spool.ts).
   */
  fullness(): number;
}

/** For a node without a state dir (stand-alone `--config` mode): records are not kept. */
export const noSpool: RequestSpool = {
  open: () => undefined,
  finalise: async () => undefined,
  keepsBodies: () => false,
  fullness: () => 0,
};
