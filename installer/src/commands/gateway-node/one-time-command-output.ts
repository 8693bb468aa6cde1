/**
 * Prints a one-time install / re-enroll / upgrade command the way the console shows it: its
 * pre-check first (the same run with --check-only and no token, when the API gives one), the warning
 * that it is shown once and must stay private, the command itself on a line of its own, and — when
 * the command names a --ca-file — how that CA file gets onto the node host (`--ca-out F` writes it).
 */
import { CommandFailure } from '../../cli-context.js';
import type { CliContext } from '../../cli-context.js';
import { saveCertificateFile } from '../../local-files.js';
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

/** With --json (stdout is the API's answer): --ca-out written, or why not, on stderr (exit 1 for a file holding something else). */
export function saveCaBesideJson(ctx: CliContext, nodeName: string, caOut: string | undefined, caPem: string | undefined): void {
  if (caOut === undefined) return;
  if (caPem === undefined) {
    ctx.stderr.write(`zenova: node ${nodeName} has no control-plane CA, so nothing was written to ${caOut}\n`);
    return;
  }
  const saved = saveCertificateFile(caOut, caPem, ctx.cwd);
  if (saved.outcome === 'kept-other-content') throw keptOtherContent(caOut, 'the JSON answer above carries it');
  ctx.stderr.write(saved.outcome === 'written'
    ? `zenova: saved the control-plane CA to ${saved.path}\n`
    : `zenova: ${saved.path} already holds the control-plane CA (left as is)\n`);
}

/**
 * --ca-out names a file that holds something else: it is kept, and the run fails (exit 1) after
 * the command was shown, as the node or command the API made stays; the file's content is not quoted.
 */
function keptOtherContent(caOut: string, whereTheCaIs: string): CommandFailure {
  return new CommandFailure(`--ca-out ${caOut} already exists and holds something other than this CA, so it was left as is and the CA was not saved there (${whereTheCaIs}); `
    + `the command shown stands: save the CA by hand, or next time pass another --ca-out path or remove ${caOut} first`);
}

/**
 * Prints the command and its CA advice; writes --ca-out when asked and the node has a CA (never
 * over a file holding something else: then the CA is printed and the run fails, exit 1).
 */
export function printOneTimeCommand(ctx: CliContext, out: OneTimeCommandOutput): void {
  const { issued, kind } = out;
  const write = (text = ''): void => { ctx.stdout.write(`${text}\n`); };
  if (issued.checkCommand !== undefined) {
    // Seed 004 §9.4: the pre-check first; it carries no token, so it may be run again and again.
    write(`Pre-check for node ${out.nodeName} (spends no token, writes nothing; run it as often as you like):`);
    write(`Run it first as root on the node host, in the directory that holds zenova-node.zpkg${caFileInCommand(issued.checkCommand) === undefined ? '' : ' and the CA file named below'}.`);
    write(`If it reports a blocking finding, fix that and run it again; do not run the ${TITLES[kind].toLowerCase()} until it passes.`);
    write();
    write(`  ${issued.checkCommand}`);
    write();
  }
  write(`${TITLES[kind]} for node ${out.nodeName} (${SHOWN_ONCE_WARNING}).`);
  write(`It carries a one-time token, valid until ${issued.expiresAt}. ${PURPOSES[kind]}`);
  write();
  write(`  ${issued.command}`);
  write();
  write('The token is piped in (printf is the shell\'s own), so it is in no process list. To keep it out of the shell history too,');
  write('put it in a file only root can read, drop "printf … |" and replace "--token-file -" with "--token-file <file>".');
  if (out.reissued) write(`Any earlier unused ${TITLES[kind].toLowerCase()} of node ${out.nodeName} no longer works.`);

  const caName = caFileInCommand(issued.command);
  if (caName === undefined) {
    if (out.caOut !== undefined) ctx.stderr.write(`zenova: node ${out.nodeName} has no control-plane CA, so nothing was written to ${out.caOut}\n`);
    return;
  }
  write();
  if (out.caPem !== undefined && out.caOut !== undefined) {
    const saved = saveCertificateFile(out.caOut, out.caPem, ctx.cwd);
    if (saved.outcome === 'kept-other-content') {
      write(`The command's --ca-file is ${caName}: save this CA under that name on the node host, next to zenova-node.zpkg (${out.caOut} was not written: see below):`);
      write();
      write(out.caPem.trimEnd());
      throw keptOtherContent(out.caOut, 'it is printed above');
    }
    const where = saved.outcome === 'written' ? `Saved the control-plane CA to ${saved.path}` : `${saved.path} already holds the control-plane CA (left as is)`;
    write(`${where}: copy it to the node host as ${caName}, next to zenova-node.zpkg (the command's --ca-file).`);
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
