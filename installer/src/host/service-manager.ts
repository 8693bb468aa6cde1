/**
 * What the installer and `zenova status`/`logs` need from the service manager, and no more. The
 * real one (systemd-service-manager.ts) runs systemctl and journalctl; tests use a fake.
 */

export type ServiceState = 'active' | 'activating' | 'deactivating' | 'inactive' | 'failed' | 'unknown';

/** A unit's restarts since it was started and how its main process last ended: tells a crash loop from a slow start. */
export interface RestartRecord {
  /** systemd's NRestarts: automatic restarts (Restart=) since the unit was last started. */
  restarts: number;
  /** How the main process last ended, e.g. 'exited with status 3'; undefined when it has not ended. */
  lastExit: string | undefined;
}

export interface ServiceManager {
  /** The unit file's text as installed, or undefined when there is none. */
  readUnit(name: string): Promise<string | undefined>;
  /** Writes (or replaces) a unit file; call reload() afterwards. */
  writeUnit(name: string, text: string): Promise<void>;
  /** Removes a unit file if present. */
  removeUnit(name: string): Promise<void>;
  /** systemctl daemon-reload. */
  reload(): Promise<void>;
  enable(name: string): Promise<void>;
  disable(name: string): Promise<void>;
  start(name: string): Promise<void>;
  stop(name: string): Promise<void>;
  /**
   * Stops and starts the unit as one job of the service manager's (`systemctl restart`), which it
   * finishes even if this process dies meanwhile (a dropped SSH session between a stop and a start
   * left the node stopped).
   */
  restart(name: string): Promise<void>;
  state(name: string): Promise<ServiceState>;
  /** The unit's restart record (`systemctl show -p NRestarts,ExecMainCode,ExecMainStatus`); undefined when unknown. */
  restartRecord(name: string): Promise<RestartRecord | undefined>;
  /**
   * Streams the unit's journal (`journalctl -u UNIT [--since T] --no-pager`) to `out`; resolves
   * with journalctl's exit code.
   */
  journal(unit: string, opts: { since?: string; lines?: number }, out: { write(text: string): unknown }, err: { write(text: string): unknown }): Promise<number>;
}
