// Words the CLI prints for the operator to paste into a shell: one word each, whatever they hold.

/** `text` as one POSIX shell word: single quotes, a `'` inside written as '\''. */
export function shellQuote(text: string): string {
  return `'${text.replaceAll("'", "'\\''")}'`;
}
