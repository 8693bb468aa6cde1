/**
 * The other replicas' heartbeat figures, for the replica of `serve --replicas K` that holds the
 * control link: each replica counts only its own callers (RequestWindow), and the heartbeat must
 * carry the node's. While this process holds the link it asks the supervisor every few seconds
 * (replica-admin.ts) for the others' figures; the heartbeat, which is built synchronously, adds the
 * latest answer to this process's own. Nothing is written per request and nothing is shared on
 * disk: a replica restarted by the supervisor is a new process with an empty window, so its old
 * counts are gone, never counted twice.
 */
import type { Logger } from '../logger.js';
import { askPeerWindows } from './replica-admin.js';
import type { PeerWindowAnswer } from './replica-admin.js';
import type { WindowFigures } from './request-window.js';

/** How often the link holder asks; the others' figures in a heartbeat are at most this old (plus the answer's time). */
const REFRESH_MS = 2_000;
/** How long the supervisor waits for each other replica, and this process for the supervisor. */
export const PEER_ANSWER_MS = 1_000;
const SUPERVISOR_ANSWER_MS = PEER_ANSWER_MS + 500;
/**
 * An answer older than this is dropped (the supervisor stopped answering): the heartbeat then
 * carries this process's figures only rather than figures frozen at some past moment.
 */
const STALE_AFTER_MS = 10_000;

type Ask = (timeoutMs: number) => Promise<PeerWindowAnswer | undefined>;

export class PeerWindows {
  private latest: { figures: WindowFigures; at: number } | undefined;
  private timer: NodeJS.Timeout | undefined;
  private running = false;
  /** Bumped by start/stop, so an answer to an earlier run is not kept. */
  private run = 0;

  constructor(
    private readonly logger: Logger,
    private readonly ask: Ask = askPeerWindows,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** Starts asking (at once, so the first heartbeat of a new link already has the others' figures). */
  start(): void {
    this.stop();
    this.running = true;
    void this.refresh(++this.run);
  }

  stop(): void {
    this.running = false;
    this.run++;
    clearTimeout(this.timer);
    this.timer = undefined;
    this.latest = undefined;
  }

  /** The other replicas' figures summed, from the latest answer; zero when there is none recent. */
  figures(): WindowFigures {
    const latest = this.latest;
    if (latest === undefined || this.now() - latest.at > STALE_AFTER_MS) return { requests: 0, errors: 0 };
    return latest.figures;
  }

  private async refresh(run: number): Promise<void> {
    const answer = await this.ask(SUPERVISOR_ANSWER_MS).catch(() => undefined);
    if (run !== this.run || !this.running) return;
    if (answer === undefined) {
      this.logger.debug('the supervisor did not answer for the other replicas\' heartbeat figures in time: the heartbeat carries this replica\'s only until it does');
    } else {
      this.latest = { figures: answer.figures, at: this.now() };
      if (answer.missing.length > 0) {
        this.logger.debug({ missing: answer.missing }, 'replicas did not answer for their heartbeat figures in time: their figures are left out');
      }
    }
    this.timer = setTimeout(() => void this.refresh(run), REFRESH_MS);
    this.timer.unref();
  }
}

/** Two windows' figures added. */
export function addFigures(a: WindowFigures, b: WindowFigures): WindowFigures {
  return { requests: a.requests + b.requests, errors: a.errors + b.errors };
}
