// `zenova-node doctor`: print each check (ok / FAIL with advice); exit 1 when any failed (a bad
// command line is exit 2, before this runs: DOCTOR_USAGE says all three).
import { runDoctor } from '../doctor/doctor.js';
import type { CliCommand } from './args.js';
import type { CliIo } from './cli-io.js';

type DoctorCommand = Extract<CliCommand, { kind: 'doctor' }>;

export async function runDoctorCommand(command: DoctorCommand, io: CliIo): Promise<number> {
  const checks = await runDoctor(command.stateDir, command.tls !== undefined ? { tls: command.tls } : {});
  for (const check of checks) {
    io.stdout.write(`${check.ok ? 'ok  ' : 'FAIL'}  ${check.label}\n`);
    if (!check.ok && check.advice !== undefined) io.stdout.write(`      ${check.advice}\n`);
  }
  const failed = checks.filter((c) => !c.ok).length;
  io.stdout.write(failed === 0 ? 'all checks passed\n' : `${failed} check${failed === 1 ? '' : 's'} failed\n`);
  return failed === 0 ? 0 : 1;
}
