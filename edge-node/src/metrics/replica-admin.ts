/**
 * The admin port of a node run as replicas (`zenova-node serve --replicas K`, cli/replica-supervisor.ts).
 * The supervisor listens on it and asks each replica (a cluster worker) over IPC for its metrics
 * text and its readiness. Replicas never bind it: cluster would share it among them round-robin,
 * and each scrape would get one random replica's figures. Here: which process is a replica, the
 * IPC questions and answers on both sides, and the merge of the replicas' metric texts into one
 * exposition with a `replica` label on every sample.
 */
import cluster from 'node:cluster';
import type { Worker } from 'node:cluster';
import type { WindowFigures } from './request-window.js';

/** Set by the supervisor in each replica's environment: the slot (1..K) the process fills. */
export const REPLICA_INDEX_ENV = 'ZENOVA_NODE_REPLICA_INDEX';

/** This process's replica slot when a supervisor started it (a cluster worker with the slot set); undefined otherwise. */
export function replicaIndex(env: NodeJS.ProcessEnv = process.env): number | undefined {
  if (!cluster.isWorker) return undefined;
  const raw = env[REPLICA_INDEX_ENV];
  if (raw === undefined || !/^\d{1,3}$/.test(raw)) return undefined;
  return Number(raw);
}

/** `window`: the replica's heartbeat figures (RequestWindow), summed into the link holder's heartbeat. */
export type AdminQuestionKind = 'metrics' | 'readyz' | 'window';

interface AdminQuestion {
  zenovaAdmin: AdminQuestionKind;
  id: number;
  answer?: undefined;
}

/** A replica's readiness, as its caller port's /readyz would answer. */
export interface ReplicaReadiness {
  ready: boolean;
  body: unknown;
}

/** A replica's answer: the metrics text, or its readiness; `error` when it could not make one. */
export type AdminAnswer =
  | { zenovaAdmin: 'metrics'; id: number; answer: true; text?: string; error?: string }
  | { zenovaAdmin: 'readyz'; id: number; answer: true; readiness?: ReplicaReadiness; error?: string }
  | { zenovaAdmin: 'window'; id: number; answer: true; figures?: WindowFigures; error?: string };

function isQuestion(message: unknown): message is AdminQuestion {
  const m = message as Partial<AdminQuestion> | null;
  return typeof m === 'object' && m !== null && (m.zenovaAdmin === 'metrics' || m.zenovaAdmin === 'readyz' || m.zenovaAdmin === 'window') && typeof m.id === 'number' && m.answer === undefined;
}

function isAnswer(message: unknown, kind: AdminQuestionKind, id: number): message is AdminAnswer {
  const m = message as Partial<AdminAnswer> | null;
  return typeof m === 'object' && m !== null && m.zenovaAdmin === kind && m.id === id && m.answer === true;
}

// ---- the replica's side ----

const answerers: { metrics?: () => string; readyz?: () => ReplicaReadiness; window?: () => WindowFigures } = {};
let answering = false;

function onQuestion(message: unknown): void {
  if (!isQuestion(message)) return;
  const { zenovaAdmin: kind, id } = message;
  let reply: AdminAnswer;
  try {
    if (kind === 'metrics') {
      const render = answerers.metrics;
      reply = render === undefined ? { zenovaAdmin: kind, id, answer: true, error: 'no metrics yet' } : { zenovaAdmin: kind, id, answer: true, text: render() };
    } else if (kind === 'readyz') {
      const read = answerers.readyz;
      reply = read === undefined ? { zenovaAdmin: kind, id, answer: true, error: 'not serving yet' } : { zenovaAdmin: kind, id, answer: true, readiness: read() };
    } else {
      const read = answerers.window;
      reply = read === undefined ? { zenovaAdmin: kind, id, answer: true, error: 'not serving yet' } : { zenovaAdmin: kind, id, answer: true, figures: read() };
    }
  } catch (err) {
    reply = { zenovaAdmin: kind, id, answer: true, error: (err as Error).message };
  }
  // The supervisor may be gone (its death ends this replica too); nothing to do about a lost answer.
  process.send?.(reply, undefined, undefined, () => undefined);
}

function answer<K extends AdminQuestionKind>(kind: K, fn: NonNullable<(typeof answerers)[K]>): () => void {
  answerers[kind] = fn;
  if (!answering) {
    process.on('message', onQuestion);
    answering = true;
  }
  return () => {
    if (answerers[kind] !== fn) return;
    delete answerers[kind];
    if (answerers.metrics === undefined && answerers.readyz === undefined && answerers.window === undefined && answering) {
      process.off('message', onQuestion);
      answering = false;
    }
  };
}

/** In a replica: answer the supervisor's metrics scrapes with `render`. Returns the undo. */
export function answerMetricsOverIpc(render: () => string): () => void {
  return answer('metrics', render);
}

/** In a replica: answer the supervisor's /readyz with `read`. Returns the undo. */
export function answerReadinessOverIpc(read: () => ReplicaReadiness): () => void {
  return answer('readyz', read);
}

/** In a replica: answer the supervisor's questions for this replica's heartbeat figures with `read`. Returns the undo. */
export function answerWindowOverIpc(read: () => WindowFigures): () => void {
  return answer('window', read);
}

// ---- the other replicas' heartbeat figures, for the replica holding the control link ----

/** Link holder → supervisor: the other replicas' figures, please. */
interface PeerWindowQuestion {
  zenovaPeerWindow: 'ask';
  id: number;
}

/** Supervisor → link holder: the figures summed over the replicas that answered in time. */
export interface PeerWindowAnswer {
  zenovaPeerWindow: 'answer';
  id: number;
  figures: WindowFigures;
  /** The slots whose figures are in `figures`. */
  answered: number[];
  /** Slots serving that did not answer in time (their figures are left out). */
  missing: number[];
}

export function isPeerWindowQuestion(message: unknown): message is PeerWindowQuestion {
  const m = message as Partial<PeerWindowQuestion> | null;
  return typeof m === 'object' && m !== null && m.zenovaPeerWindow === 'ask' && typeof m.id === 'number';
}

function isPeerWindowAnswer(message: unknown, id: number): message is PeerWindowAnswer {
  const m = message as Partial<PeerWindowAnswer> | null;
  return typeof m === 'object' && m !== null && m.zenovaPeerWindow === 'answer' && m.id === id && typeof m.figures === 'object' && m.figures !== null;
}

let nextPeerQuestionId = 1;

/**
 * In a replica: asks the supervisor for the other replicas' figures; undefined when it did not
 * answer within `timeoutMs` (or there is no supervisor).
 */
export function askPeerWindows(timeoutMs: number): Promise<PeerWindowAnswer | undefined> {
  const id = nextPeerQuestionId++;
  return new Promise((resolve) => {
    if (process.send === undefined) {
      resolve(undefined);
      return;
    }
    const done = (answer: PeerWindowAnswer | undefined): void => {
      clearTimeout(timer);
      process.off('message', onMessage);
      resolve(answer);
    };
    const onMessage = (message: unknown): void => {
      if (isPeerWindowAnswer(message, id)) done(message);
    };
    const timer = setTimeout(() => done(undefined), timeoutMs);
    process.on('message', onMessage);
    process.send({ zenovaPeerWindow: 'ask', id } satisfies PeerWindowQuestion, undefined, undefined, (err) => {
      if (err) done(undefined);
    });
  });
}

/**
 * In the supervisor: answers `asker`'s question with the sum of `others`' figures, each asked with
 * `timeoutMs` (a stuck replica is left out rather than waited for).
 */
export async function answerPeerWindows(
  asker: Worker,
  question: PeerWindowQuestion,
  others: ReadonlyArray<{ replica: number; worker: Worker }>,
  timeoutMs: number,
): Promise<PeerWindowAnswer> {
  const answers = await Promise.all(others.map(async ({ replica, worker }) => ({ replica, answer: await askReplica(worker, 'window', timeoutMs) })));
  const reply: PeerWindowAnswer = { zenovaPeerWindow: 'answer', id: question.id, figures: { requests: 0, errors: 0 }, answered: [], missing: [] };
  for (const { replica, answer } of answers) {
    const figures = answer?.zenovaAdmin === 'window' ? answer.figures : undefined;
    if (figures === undefined) {
      reply.missing.push(replica);
      continue;
    }
    reply.figures.requests += figures.requests;
    reply.figures.errors += figures.errors;
    reply.answered.push(replica);
  }
  try {
    // The asker may have died meanwhile; its successor asks again.
    asker.send(reply, undefined, () => undefined);
  } catch {
    /* gone */
  }
  return reply;
}

// ---- the supervisor's side ----

let nextQuestionId = 1;

/**
 * Asks one replica; resolves with its answer, or undefined when it did not answer within
 * `timeoutMs` or exited first (a scrape never waits on a stuck replica for long).
 */
export function askReplica(worker: Worker, kind: AdminQuestionKind, timeoutMs: number): Promise<AdminAnswer | undefined> {
  const id = nextQuestionId++;
  return new Promise((resolve) => {
    const done = (answer: AdminAnswer | undefined): void => {
      clearTimeout(timer);
      worker.off('message', onMessage).off('exit', onExit);
      resolve(answer);
    };
    const onMessage = (message: unknown): void => {
      if (isAnswer(message, kind, id)) done(message);
    };
    const onExit = (): void => done(undefined);
    const timer = setTimeout(() => done(undefined), timeoutMs);
    worker.on('message', onMessage).on('exit', onExit);
    try {
      worker.send({ zenovaAdmin: kind, id } satisfies AdminQuestion, undefined, (err) => {
        if (err) done(undefined);
      });
    } catch {
      done(undefined);
    }
  });
}

// ---- merging the replicas' metrics ----

const SAMPLE_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*/;

interface Family {
  help?: string;
  type?: string;
  samples: string[];
}

/** `name{a="b"} 1` → `name{replica="2",a="b"} 1`; the label goes first, so no label value is parsed. */
function withLabel(line: string, name: string, label: string): string {
  const rest = line.slice(name.length);
  if (rest.startsWith('{}')) return `${name}{${label}}${rest.slice(2)}`;
  if (rest.startsWith('{')) return `${name}{${label},${rest.slice(1)}`;
  return `${name}{${label}}${rest}`;
}

/** Whether a sample named `sample` belongs to the family `family` (histograms and summaries add suffixes). */
function belongsTo(sample: string, family: string | undefined): family is string {
  if (family === undefined) return false;
  if (sample === family) return true;
  return sample.startsWith(family) && ['_bucket', '_sum', '_count'].includes(sample.slice(family.length));
}

/**
 * One exposition from the replicas' texts: each family's HELP and TYPE once (the first replica's),
 * then its samples from every replica in the order given, each with `replica="<replica>"` added;
 * the family's lines stay together, as the format requires. A sample outside any declared family
 * is kept as its own family, untyped.
 */
export function mergeReplicaMetrics(parts: ReadonlyArray<{ replica: string; text: string }>): string {
  const families = new Map<string, Family>();
  const familyOf = (name: string): Family => {
    let family = families.get(name);
    if (family === undefined) {
      family = { samples: [] };
      families.set(name, family);
    }
    return family;
  };
  for (const { replica, text } of parts) {
    const label = `replica="${replica.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n')}"`;
    let current: string | undefined;
    for (const line of text.split('\n')) {
      if (line === '') continue;
      const meta = /^# (HELP|TYPE) (\S+)/.exec(line);
      if (meta !== null) {
        const [, what, name] = meta as unknown as [string, 'HELP' | 'TYPE', string];
        current = name;
        const family = familyOf(name);
        if (what === 'HELP') family.help ??= line;
        else family.type ??= line;
        continue;
      }
      if (line.startsWith('#')) continue;
      const name = SAMPLE_NAME.exec(line)?.[0];
      if (name === undefined) continue;
      familyOf(belongsTo(name, current) ? current : name).samples.push(withLabel(line, name, label));
    }
  }
  const out: string[] = [];
  for (const family of families.values()) {
    if (family.help !== undefined) out.push(family.help);
    if (family.type !== undefined) out.push(family.type);
    out.push(...family.samples);
  }
  return out.length === 0 ? '' : `${out.join('\n')}\n`;
}
