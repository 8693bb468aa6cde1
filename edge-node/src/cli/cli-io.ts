// Where a command writes: the process's streams in production, buffers in tests.
export interface CliIo {
  stdout: { write(text: string): unknown };
  stderr: { write(text: string): unknown };
  /** Standard input (`enroll --token-file -`); undefined when the command has none (tests). */
  stdin?: AsyncIterable<Buffer | string>;
}
