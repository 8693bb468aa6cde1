// Reads the installed etc/node.env (KEY=VALUE lines, as unit-files.ts writes them).
import { readFile } from 'node:fs/promises';

export async function readNodeEnv(file: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch {
    return out;
  }
  for (const line of text.split('\n')) {
    const m = /^([A-Z0-9_]+)=(.*)$/.exec(line.trim());
    if (m?.[1] !== undefined && m[2] !== undefined) out[m[1]] = m[2];
  }
  return out;
}
