/**
 * Prints a one-time install / re-enroll / upgrade command the way the console shows it: the warning
 * that it is shown once and must stay private, the command itself on a line of its own, and — when
 * the command names a --ca-file — how that CA file gets onto the node host (`--ca-out F` writes it).
 */
import type { CliContext } from '../../cli-context.js';
import { writeTextFileAtomic } from '../../local-files.js';
import type { CommandKind, OneTimeCommand } from './api-schemas.js';

export const SHOWN_ONCE_WARNING = 'shown once; store it safely; do not paste it into chat/e-mail';

const TITLES: Record<CommandKind, string> = {
  install: 'Install command',
  reenroll: 'Re-enroll command',
  upgrade: 'Upgrade command',
};

const PURPOSES: Record<CommandKind, string> = {
  install: 'Run it as root on the node host, in the directory that holds zenova-node.zpkg.',
  reenroll: 'Run it as root on the node host to give it a new identity (the old credentials stop working).',
  upgrade: 'Run it as root on the node host, in the directory that holds the new zenova-node.zpkg.',
};

export interface OneTimeCommandOutput {
  nodeName: string;
  kind: CommandKind;
  issued: OneTimeCommand;
  /** The CA the command's --ca-file must hold, if known (from the API, or the file given to create). */
  caPem: string | undefined;
  /** Where the operator already has that CA (create --ca-file), so we can say "copy this file". */
  caSourceFile: string | undefined;
  /** --ca-out: write the CA there. */
  caOut: string | undefined;
  /** A reissue: say that the previous unused command of this kind stopped working. */
  reissued: boolean;
}

/** The file name after `--ca-file` in the generated command, if any. */
export function caFileInCommand(command: string): string | undefined {
  return /(?:^|\s)--ca-file\s+(\S+)/.exec(command)?.[1];
}

/** With --json (stdout is the API's answer): --ca-out written, or why not, on stderr. */
export function saveCaBesideJson(ctx: CliContext, nodeName: string, caOut: string | undefined, caPem: string | undefined): void {
  if (caOut === undefined) return;
  if (caPem === undefined) {
    ctx.stderr.write(`zenova: node ${nodeName} has no control-plane CA, so nothing was written to ${caOut}\n`);
    return;
  }
  ctx.stderr.write(`zenova: saved the control-plane CA to ${writeTextFileAtomic(caOut, caPem, ctx.cwd)}\n`);
}

/** Prints the command and its CA advice; writes --ca-out when asked and the node has a CA. */
export function printOneTimeCommand(ctx: CliContext, out: OneTimeCommandOutput): void {
  const { issued, kind } = out;
  const write = (text = ''): void => { ctx.stdout.write(`${text}\n`); };
  write(`${TITLES[kind]} for node ${out.nodeName} (${SHOWN_ONCE_WARNING}).`);
  write(`It carries a one-time token, valid until ${issued.expiresAt}. ${PURPOSES[kind]}`);
  write();
  write(`  ${issued.command}`);
  write();
  write('Prefer --token-file: put the token in a file only root can read and replace "--token <token>" with "--token-file <file>",');
  write(`or replace it with "--token-file -" and pipe the token in: printf '%s\\n' '<token>' | sudo ./zenova install node … --token-file -`);
  if (out.reissued) write(`Any earlier unused ${TITLES[kind].toLowerCase()} of node ${out.nodeName} no longer works.`);

  const caName = caFileInCommand(issued.command);
  if (caName === undefined) {
    if (out.caOut !== undefined) ctx.stderr.write(`zenova: node ${out.nodeName} has no control-plane CA, so nothing was written to ${out.caOut}\n`);
    return;
  }
  write();
  if (out.caPem !== undefined && out.caOut !== undefined) {
    const written = writeTextFileAtomic(out.caOut, out.caPem, ctx.cwd);
    write(`Saved the control-plane CA to ${written}: copy it to the node host as ${caName}, next to zenova-node.zpkg (the command's --ca-file).`);
  } else if (out.caSourceFile !== undefined) {
    write(`The command's --ca-file is ${caName}: copy ${out.caSourceFile} (the CA you gave) to the node host under that name, next to zenova-node.zpkg.`);
  } else if (out.caPem !== undefined) {
    write(`The command's --ca-file is ${caName}: save this CA under that name on the node host, next to zenova-node.zpkg (--ca-out FILE writes it for you):`);
    write();
    write(out.caPem.trimEnd());
  } else {
    write(`The command's --ca-file is ${caName}: put the node's control-plane CA (the one given when the node was created or its network was last edited) there on the node host.`);
  }
}
