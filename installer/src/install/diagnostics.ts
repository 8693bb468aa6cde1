/**
 * Every NODE-… diagnostic code the installer can print: what it means and the default advice.
 * docs/diagnostics.md lists the same codes (test/installer/diagnostics-doc.test.ts keeps them in step).
 * A Finding is one occurrence: the code, a one-line cause naming the facts, and the advice.
 */

export interface DiagnosticSpec {
  /** Whether the finding stops the install (warnings are printed and the install goes on). */
  blocking: boolean;
  /** What the code means, for the docs table. */
  meaning: string;
  advice: string;
}

/** How far back the log commands in the advice look. */
export const LOG_SINCE = "--since '10 min ago'";

/** NODE-SERVICE-START's advice, naming a command that shows node-edge's log on this host. */
export function serviceStartAdvice(logsCommand: string, keepOptions = ''): string {
  const again = keepOptions === '' ? '' : `, adding ${keepOptions} as given to this command (the reenroll installs the node again from its own options: without them node-edge would listen on the default address over plain HTTP)`;
  return `Read the log (${logsCommand}), fix the cause, then issue a reenroll command (\`zenova gateway-node reenroll-command --name NAME\`) and run it with --reenroll${again}: it installs the node again around the kept data/.`;
}

export const DIAGNOSTICS = {
  'NODE-HOST-OS': { blocking: true, meaning: 'The host is not Linux.', advice: 'Install the node on a Linux host with systemd (x86_64 or aarch64).' },
  'NODE-HOST-ROOT': { blocking: true, meaning: 'The installer does not run as root.', advice: 'Run the command with sudo, or as root.' },
  'NODE-HOST-ARCH': { blocking: true, meaning: "The host's CPU architecture is unsupported or differs from the package's platform.", advice: 'Download the package for this host\'s architecture (x86_64 or aarch64) from the same release as the control plane.' },
  'NODE-HOST-LIBC': { blocking: true, meaning: "The host's glibc, the GLIBCXX or CXXABI versions of its libstdc++.so.6, or the GCC versions of its libgcc_s.so.1, are older than the package's native files (the carried Node runtime and better-sqlite3) need; the floor is in the package's signed manifest. node-edge could not start there.", advice: "Install on a host whose glibc, libstdc++ and libgcc_s meet the floor the cause names (docs/install.md, Host requirements), e.g. a newer release of the OS, or use a package built on a build host with a glibc no newer than this host's." },
  'NODE-HOST-MEMORY': { blocking: true, meaning: 'The host has less memory than a node needs (1 GiB).', advice: 'Give the host at least 1 GiB of memory.' },
  'NODE-HOST-MEMORY-REPLICAS': { blocking: false, meaning: "The host has less memory than the node's replicas need: 1 GiB plus 512 MiB for each node-edge process beyond the first (the count comes with the enrollment or upgrade answer, so this is a warning: the install goes on).", advice: 'Give the host more memory. To run fewer processes meanwhile, set ZENOVA_NODE_REPLICAS in <dir>/etc/node.env and `systemctl restart node-edge` (the next --upgrade or --reenroll writes the node\'s count again).' },
  'NODE-HOST-DISK': { blocking: true, meaning: 'The filesystem of the install dir has too little free space for the release and the spool.', advice: 'Free space there, or create the node with an install dir on a larger volume (--install-dir).' },
  'NODE-HOST-SYSTEMD': { blocking: true, meaning: 'systemd is not the running service manager.', advice: 'Install on a host booted with systemd (PID 1); containers without systemd are not supported by the installer (use `zenova-node serve`).' },
  'NODE-HOST-NOEXEC': { blocking: true, meaning: 'The install dir\'s filesystem is mounted noexec: the node could not run from it.', advice: 'Choose an install dir on a filesystem mounted without noexec, or remount it.' },
  'NODE-HOST-SELINUX': { blocking: true, meaning: 'SELinux is enforcing and the install dir\'s label does not let systemd run programs from it.', advice: "Label the dir for executables (semanage fcontext -a -t bin_t '<dir>(/.*)?' && restorecon -R <dir>) or choose another install dir." },
  'NODE-HOST-APPARMOR': { blocking: true, meaning: 'An AppArmor profile in enforce mode covers the install dir.', advice: 'Remove or adjust the AppArmor profile that covers the install dir, or choose another install dir.' },
  'NODE-HOST-CONTROL-PLANE': { blocking: true, meaning: 'This host runs the control plane; its node (office-primary) is installed with it.', advice: 'Install gateway nodes on other hosts; the control-plane host already has its node.' },
  'NODE-PORT-IN-USE': { blocking: true, meaning: 'A port the node must listen on is already in use.', advice: 'Stop the program using the port, or pass --listen HOST:PORT with a free port.' },
  'NODE-LISTEN-UNAVAILABLE': { blocking: true, meaning: 'The address node-edge must listen on (--listen) cannot be bound on this host: an IP address that is not this host\'s, a name that does not resolve, or another bind error (named in the cause).', advice: 'Pass --listen with an address of this host (or 0.0.0.0 for all of them) and a free port, e.g. --listen 0.0.0.0:7480.' },
  'NODE-TLS-PAIR': { blocking: true, meaning: "The caller port's HTTPS pair (--tls-cert, --tls-key) cannot be used: a file is missing or unreadable, holds no PEM certificate or unencrypted PEM key, the key is not the certificate's, or the certificate has expired or is not valid yet.", advice: 'Pass the PEM certificate of the node\'s address (the server certificate first, then its intermediates) and its unencrypted private key, both readable by root, then run the command again.' },
  'NODE-CLOCK-SKEW': { blocking: true, meaning: "The host's clock differs from the control plane's by more than 30 s.", advice: 'Sync the clock (e.g. `timedatectl set-ntp true`) and run the command again.' },
  'NODE-CP-URL': { blocking: true, meaning: '--control-plane is not a usable https:// URL.', advice: 'Copy the --control-plane URL from the install command the console printed.' },
  'NODE-CP-CA-FILE': { blocking: true, meaning: 'The --ca-file cannot be read, holds no PEM certificate, or holds a private key beside its certificate (a key is never copied, sent or stored; nothing was written).', advice: 'Save the control plane\'s CA (shown with the install command) to the file named by --ca-file.' },
  'NODE-CP-UNREACHABLE': { blocking: true, meaning: 'The control plane cannot be reached over HTTPS from this host.', advice: 'Check DNS, routes and firewalls to the control-plane URL (curl -v <url>); a host that reaches it only through a proxy needs https_proxy set for the command (see install.md, Through a proxy).' },
  'NODE-CP-PROXY-SERVICE': { blocking: true, meaning: 'The control plane was reached through the proxy in https_proxy / HTTPS_PROXY, but node-edge runs under systemd, which passes it none of this shell\'s variables, and no drop-in in /etc/systemd/system/node-edge.service.d/ gives it the proxy: it could not reach the control plane, and the install would fail after using its token.', advice: 'Nothing was changed and the token was not used. Give node-edge the proxy first: create /etc/systemd/system/node-edge.service.d/proxy.conf with [Service], Environment=https_proxy=http://PROXY:PORT and Environment=no_proxy=localhost,127.0.0.1 (with a password: EnvironmentFile= naming a root-only file), then run the same command again. If this host reaches the control plane directly, add its host to no_proxy instead.' },
  'NODE-CP-PROXY': { blocking: true, meaning: 'The proxy named by https_proxy / HTTPS_PROXY cannot be reached, refused to open a tunnel (CONNECT) to the control plane, or the variable is not a usable http:// proxy URL. The cause names the proxy by host:port and its answer, never its credentials.', advice: 'Allow CONNECT to the control plane\'s host:port on the proxy, fix the proxy variable, or, if the control plane is reachable directly, list its host in no_proxy / NO_PROXY (see install.md, Through a proxy).' },
  'NODE-CP-NOT-HTTPS': { blocking: true, meaning: "Something answered on the control-plane URL's port, but not over HTTPS (a plain-HTTP service, or another protocol).", advice: "The URL's port does not serve HTTPS: copy the --control-plane URL (with its port) from the install command the console printed." },
  'NODE-CP-TLS': { blocking: true, meaning: "The control plane's HTTPS certificate is not trusted or does not match its name.", advice: "Not trusted: pass the CA that signed the control plane's certificate with --ca-file; a command without --ca-file comes from a node created without that CA: set it on the node (`PATCH /api/v1/nodes/NAME/network` with `caPem`) and issue the command again (`zenova gateway-node install-command NAME --ca-out FILE` writes the CA to FILE). A name mismatch: use the control-plane address the certificate names. Expired or not yet valid: check this host's clock, or renew the certificate." },
  'NODE-CP-NOT-ZENOVA': { blocking: true, meaning: 'The URL answered, but not as a Zenova control plane.', advice: 'Use the control plane\'s callback URL from the install command.' },
  'NODE-CP-PROTOCOL': { blocking: true, meaning: 'The package speaks another control protocol version than the control plane.', advice: 'Use the node package from the same release as the control plane.' },
  'NODE-PKG-UNREADABLE': { blocking: true, meaning: 'The package file cannot be read, or is not a regular file (a FIFO, a device or a directory is refused before anything is read from it).', advice: 'Check the --package path and that the file was copied completely.' },
  'NODE-PKG-FORMAT': { blocking: true, meaning: 'The file is not a well-formed .zpkg (header or length wrong: a damaged or truncated download, or not a package at all).', advice: "Download the package again from the release site and check its SHA-256 (`sha256sum FILE`) against the release's SHA256SUMS." },
  'NODE-PKG-SIGNATURE': { blocking: true, meaning: "The package's signature does not verify with the release key this installer trusts, or the installer's release key is missing or damaged.", advice: 'Download the package again from the release site; never install a package whose signature fails.' },
  'NODE-PKG-NEWER': { blocking: true, meaning: "The package's signature verifies with the release key (it is genuine and whole), but its signed manifest has a field or value this installer does not understand (named by path in the cause): it comes from a newer release than this installer.", advice: "Run the command with ./zenova from the installer tarball of the package's release (zenova-installer-<version>-linux-<arch>.tar.gz, the release the cause names); downloading the package again does not help." },
  'NODE-PKG-CHECKSUM': { blocking: true, meaning: 'A file in the package does not match the SHA-256 in its signed manifest.', advice: "The package is damaged or tampered with: download it again and check its SHA-256 (`sha256sum FILE`) against the release's SHA256SUMS." },
  'NODE-PKG-PRODUCT': { blocking: true, meaning: 'The package is not a Zenova node package, or lacks the node launcher.', advice: 'Use the zenova-node .zpkg of the control plane\'s release.' },
  'NODE-PKG-VERSION': { blocking: true, meaning: "The package's version is not the control plane's version (except when --upgrade only finishes an upgrade a killed run switched in: the control plane agreed to that version then).", advice: 'Download the node package of the control plane\'s version.' },
  'NODE-DIR-FORMAT': { blocking: true, meaning: 'The install dir is not an absolute path of at least two levels made of letters, digits, . _ - and /.', advice: 'Use a path such as /opt/zenova-node or /data/zenova-node.' },
  'NODE-DIR-FORBIDDEN': { blocking: true, meaning: 'The install dir is under /tmp, /var/tmp, /home, /root, /run/user, /usr, /etc or /boot, or under /run, /var/run (tmpfs, wiped on reboot), /dev, /proc or /sys (not a real disk), or its symbolic links lead there.', advice: 'Choose a dir elsewhere, e.g. /opt/zenova-node or a dir on a data volume.' },
  'NODE-DIR-CENTRAL': { blocking: true, meaning: 'The install dir is inside or overlaps the central install /opt/zenova, or its symbolic links lead there.', advice: 'Choose a dir outside /opt/zenova, e.g. /opt/zenova-node.' },
  'NODE-DIR-UNSAFE': { blocking: true, meaning: 'The install dir, a dir above it (also where its symbolic links lead), or an existing install\'s etc/, data/ or releases/ is owned by a user other than root, or writable by every user or by a group other than root\'s (without the sticky bit). node-edge runs as root from that dir: whoever may write there could replace what it runs.', advice: 'Give the dirs named to root and take write access from others: chown root:root DIR && chmod go-w DIR for each, or choose an install dir under a root-owned path such as /opt (--install-dir). Check that nothing unexpected was put there first.' },
  'NODE-DIR-DANGLING-LINK': { blocking: true, meaning: 'The install dir is, or is under, a symbolic link whose target does not exist (e.g. a volume not mounted yet): the install could not create the dir through it.', advice: 'Mount the volume the link leads to (and add it to /etc/fstab, so it is mounted at boot before node-edge starts), or fix the link (ln -sfn TARGET LINK), or choose another --install-dir; then run the command again.' },
  'NODE-DIR-READ-ONLY': { blocking: true, meaning: 'The install dir, or the nearest dir above it that exists (where the installer would create it), is on a filesystem mounted read-only, or cannot be written.', advice: 'Remount that filesystem read-write (`mount -o remount,rw MOUNTPOINT`, and drop `ro` from its /etc/fstab line), or choose an install dir on a writable filesystem (--install-dir).' },
  'NODE-DIR-IN-MEMORY': { blocking: false, meaning: 'The install dir, or the nearest dir above it that exists, is on a filesystem kept in memory (tmpfs, ramfs): unless something restores it at boot (a live or container image), the node\'s identity, spool and unsent billable records would be lost at the next reboot. A warning: the install goes on.', advice: 'Choose an install dir on a disk-backed filesystem, e.g. /opt/zenova-node (--install-dir); `findmnt -T DIR` shows the filesystem a dir is on.' },
  'NODE-DIR-NOT-EMPTY': { blocking: true, meaning: 'The install dir exists and holds files that are not a node installation (or is not a directory); its current and updater may only be links into its releases/, releases/ may hold only releases the installer unpacked, and etc/ and data/ only the installer\'s and the node\'s own files.', advice: 'Choose an empty or new dir; the installer never overwrites foreign files.' },
  'NODE-INSTALLED': { blocking: true, meaning: 'A gateway node is already installed on this host.', advice: 'Nothing was changed (check the installed node: zenova status). If it shows node-edge inactive after an install that was cut short, run a reenroll command: it enables and starts it. To re-join a control plane, issue a reenroll command (node detail › Issue reenroll command, or `zenova gateway-node reenroll-command --name NAME`) and run it as printed (it carries --reenroll). To upgrade it, issue an upgrade command (node detail › Issue upgrade command, or `zenova gateway-node upgrade-command NAME`) and run it as printed (it carries --upgrade). Never delete its dir to reinstall.' },
  'NODE-DATA-EXISTS': { blocking: true, meaning: 'The install dir holds a node identity and data from an earlier installation, but no service.', advice: 'Keep the data: issue a reenroll command (`zenova gateway-node reenroll-command --name NAME` on the control plane) and run it as printed (with --reenroll); it installs the node again around the kept data.' },
  'NODE-REENROLL-NONE': { blocking: true, meaning: '--reenroll was given, but no gateway node is installed on this host (no node-edge service, and no data/ with a node identity in the install dir).', advice: 'Run the install command without --reenroll.' },
  'NODE-DIR-MISMATCH': { blocking: true, meaning: "--reenroll was given with an --install-dir other than the installed node's dir.", advice: 'Leave out --install-dir (--reenroll keeps the installed dir), or pass the installed dir.' },
  'NODE-UPGRADE-NONE': { blocking: true, meaning: '--upgrade was given, but no complete gateway node installation is on this host (no node-edge service, its current release link unreadable or naming a release that is not unpacked in releases/, or no readable node identity in its data/).', advice: 'Install the node with the install command (without --upgrade); a node whose identity is damaged is re-enrolled first (--reenroll), then upgraded; a current link naming a missing release is relinked first, as the cause (and zenova status) says, then upgraded.' },
  'NODE-UPGRADE-VERSION': { blocking: true, meaning: "--upgrade with a package of the installed node's own version, or of an older one; or, while an earlier upgrade that was switched in never finished (killed midway), with another package than that upgrade's.", advice: "Nothing to do when the node already runs the control plane's version (zenova status shows it); an upgrade never goes back to an older release. Use the zenova-node.zpkg of the control plane's release. While an interrupted upgrade is unfinished: run it again with that upgrade's package first (even if the control plane runs a newer version now), then issue a new upgrade command for the control plane's package." },
  'NODE-UPGRADE-ENV': { blocking: true, meaning: "--upgrade, but the installed node's etc/node.env would not let node-edge start on any release: its ZENOVA_NODE_LISTEN is missing or not HOST:PORT, or the file its ZENOVA_NODE_TLS_CERT_FILE names cannot be read or holds no PEM certificate. The checks find it before anything is written or the token is used; should the file change during the run, after the switch, everything is switched back before node-edge is restarted, and no failed version is recorded (that release never ran).", advice: "Nothing was changed and the token was not used. Correct the line the cause names in <dir>/etc/node.env (ZENOVA_NODE_LISTEN=HOST:PORT, [IPv6]:PORT for an IPv6 address; ZENOVA_NODE_TLS_CERT_FILE naming the node's PEM certificate, readable by root), then run the same command again (its --check-only form shows whether the file passes now)." },
  'NODE-UPGRADE-ROLLED-BACK': { blocking: true, meaning: 'The new release was switched in and node-edge restarted, but it was not ready (config loaded and control link up) within 60 s, so the installer switched back to the previous release, which serves again with the same identity, spool and records. The failed version is recorded in data/update-state.json.', advice: "Find the cause in the log (zenova logs node-edge --since '10 min ago'), fix it, then issue a new upgrade command (node detail › Issue upgrade command, or `zenova gateway-node upgrade-command NAME`) and run that; do not rerun this command, its token is used." },
  'NODE-UPGRADE-SWITCH-BACK-FAILED': { blocking: true, meaning: 'The new release was not ready (or could not be switched in), and switching current and updater back to the previous release failed too (a link could not be written: a full disk, an I/O error) or was not done as that release is no longer in releases/ (removed during the run). The new release and the in-progress record in data/update-state.json are kept, so current never links to a removed release; data/ is untouched.', advice: "Fix the cause shown (free disk space: df -h on the install dir), then run the same command again: it finishes the interrupted upgrade without redeeming a token (restarts node-edge on the new release, waits, and switches back if it is still not ready). zenova status shows upgrade: INTERRUPTED meanwhile." },
  'NODE-INSTALL-RUNNING': { blocking: true, meaning: 'Another `zenova install node` is running on this host (it holds the install lock /run/zenova-node-install.lock); two at once would write over each other. Also when the lock\'s holder ran in another pid namespace (a container since restarted, or the host and a container sharing /run) and left no socket that answers either way (an earlier installer\'s lock): whether it still runs cannot be told then, and the cause says so.', advice: 'Wait for the other run to finish (its pid is shown), then run the command again. A lock whose process has ended is taken over by the next run by itself (also from another pid namespace, or an earlier boot): do not delete it by hand, unless the cause says its holder cannot be checked from here.' },
  'NODE-CLI-LINK': { blocking: false, meaning: '/usr/local/bin/zenova could not be linked to the installed CLI (something else is there, or the dir is not writable); the node itself is installed.', advice: 'Run the CLI by its full path (<install dir>/current/bin/zenova status); to have `zenova` on PATH, move away what is at /usr/local/bin/zenova and run `ln -s <install dir>/current/bin/zenova /usr/local/bin/zenova`.' },
  'NODE-TOKEN-FILE-MODE': { blocking: false, meaning: 'The --token-file is readable by group or others.', advice: 'Keep the token private: chmod 600 the file (umask 077 before writing it), and delete it after the install.' },
  'NODE-TOKEN-REJECTED': { blocking: true, meaning: 'The control plane refused the token (expired, already used, unknown, or of another kind).', advice: 'Issue a new install command on the control plane (node detail › Reissue install command, or `zenova gateway-node install-command --name NAME`) and run it.' },
  'NODE-ENROLL-FAILED': { blocking: true, meaning: 'Enrollment with the control plane (or, with --upgrade, redeeming the upgrade token) failed for another reason.', advice: 'Read the cause; fix it, check the host again with the command\'s --check-only form (printed with the finding: the same --package, --control-plane, --ca-file and, when it is not the default, --install-dir), then run the command again.' },
  'NODE-WRITE-FAILED': { blocking: true, meaning: 'Writing the installation failed (disk full, permissions); what was written was rolled back.', advice: 'Fix the cause shown and run the command again.' },
  'NODE-SERVICE-START': { blocking: true, meaning: 'The node-edge service did not start or did not become ready in time (the cause says when systemd kept restarting it: a crash loop, with how it last exited). A new install removes its units and the /usr/local/bin/zenova link again and keeps data/ with the new identity, so the advice names the log command that still works (the installer\'s own ./zenova, or journalctl); --reenroll of an installed node leaves its service installed.', advice: serviceStartAdvice(`zenova logs node-edge ${LOG_SINCE}`) },
} as const satisfies Record<string, DiagnosticSpec>;

/**
 * NODE-TOKEN-REJECTED after --reenroll: the control plane refuses install tokens in that mode, so
 * the advice names the reenroll command instead.
 */
export const REENROLL_TOKEN_REJECTED_ADVICE =
  'Issue a new reenroll command on the control plane (node detail › Issue reenroll command, or `zenova gateway-node reenroll-command --name NAME`) and run it as printed (with --reenroll).';

/** NODE-TOKEN-REJECTED after --upgrade: nothing was switched, the node runs its installed release. */
export const UPGRADE_TOKEN_REJECTED_ADVICE =
  'Nothing was switched: the node keeps running its installed release. Issue a new upgrade command for this host\'s node (node detail › Issue upgrade command, or `zenova gateway-node upgrade-command NAME`) and run it as printed (with --upgrade).';

/**
 * NODE-UPGRADE-VERSION while an upgrade switched in by a killed run is unfinished: that upgrade is
 * finished first with its own package, even once the control plane runs a newer version.
 */
export const UNFINISHED_UPGRADE_ADVICE =
  "Nothing was changed. Finish the interrupted upgrade first: run the command again with that upgrade's package (the version it was switching to), even if the control plane runs a newer version now; its token was redeemed then, so this command's is not used. Then, if the control plane runs a newer version, issue a new upgrade command (node detail › Issue upgrade command, or `zenova gateway-node upgrade-command NAME`) and run it with the control plane's package.";

/** NODE-ENROLL-FAILED of an install or --reenroll: the check to run before the same command again (install.ts checkOnlyCommand). */
export function enrollFailedAdvice(checkCommand: string): string {
  return `Read the cause and fix it; check the host again with \`${checkCommand}\`, then run the command again.`;
}

/** NODE-INSTALL-RUNNING when the lock's holder cannot be judged from this pid namespace (install-lock.ts). */
export const UNVERIFIED_LOCK_ADVICE = (file: string): string =>
  `Make sure no zenova install node runs on this host, nor in a container sharing ${file.slice(0, file.lastIndexOf('/'))} (\`ps -ef | grep 'zenova install'\` in each), then remove the lock by hand: rm -f ${file}, and run the same command again. Never remove it while such a run goes on.`;

/** NODE-SERVICE-START after --reenroll of an installed node: its service stays, with the new identity. */
export const REENROLL_SERVICE_START_ADVICE =
  "Read the log (zenova logs node-edge --since '10 min ago'), fix the cause, then `systemctl restart node-edge` (the service is still installed and the new identity is in place).";

/** NODE-UPGRADE-ENV found after the switch (the env file changed during the run): the token is used, the node never stopped. */
export const UPGRADE_ENV_AFTER_SWITCH_ADVICE = (from: string, envFile: string): string =>
  `The new release never ran: node-edge was never stopped and runs ${from} as before. Correct the line the cause names in ${envFile}, then issue a new upgrade command (node detail › Issue upgrade command, or \`zenova gateway-node upgrade-command NAME\`) and run that (this command's token is used).`;

/**
 * NODE-SERVICE-START after an upgrade's switch back: the previous release is back in place (links,
 * units, env file) but not ready either. The service is installed, so no reenroll is needed.
 */
export const UPGRADE_SWITCHED_BACK_START_ADVICE = (from: string): string =>
  `${from} is switched back in (current, units, env file) but did not get ready either. Read the log (zenova logs node-edge ${LOG_SINCE}), fix the cause, then \`systemctl restart node-edge\` and check it with \`zenova status\`; once it is ready, issue a new upgrade command (\`zenova gateway-node upgrade-command NAME\`) and run that (this command's token is used).`;

/**
 * NODE-UPGRADE-SWITCH-BACK-FAILED when the previous release is gone: there is nothing to switch back
 * to, so the new release stays (linked, when the switch got that far: node-edge may run it, not ready).
 */
export const UPGRADE_NO_PREVIOUS_RELEASE_ADVICE = (from: string, to: string, linksSwitched: boolean): string =>
  linksSwitched
    ? `${to} stays switched in (current, units, env file): there is no ${from} to go back to. Read the log (zenova logs node-edge ${LOG_SINCE}) and fix why ${to} is not ready, or put release ${from} back in releases/; then run the same command again: it finishes this upgrade without redeeming a token (restarts node-edge on ${to}, waits, and switches back to ${from} only if that is there). zenova status shows upgrade: INTERRUPTED meanwhile.`
    : `current still names ${from}, which is gone, and node-edge was not stopped. Fix the cause shown, link current to the release that is there as zenova status advises (\`ln -sfn releases/${to} current\` in the install dir), then run the same command again: it finishes this upgrade without redeeming a token. zenova status shows upgrade: INTERRUPTED meanwhile.`;

export type DiagnosticCode = keyof typeof DIAGNOSTICS;

export interface Finding {
  code: DiagnosticCode;
  /** One line: what was found, naming the facts (paths, numbers). */
  cause: string;
  advice: string;
  blocking: boolean;
}

export function finding(code: DiagnosticCode, cause: string, advice?: string): Finding {
  const spec: DiagnosticSpec = DIAGNOSTICS[code];
  return { code, cause, advice: advice ?? spec.advice, blocking: spec.blocking };
}
