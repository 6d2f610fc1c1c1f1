// `npm run ops -- <command>`: the operator tool on a laptop. Runs the command against DATABASE_URL
// (Stripe look-ups with STRIPE_SECRET_KEY / STRIPE_API_BASE), or — with `--lambda <function>` — in
// the ops Lambda, so nobody needs a network path to the database on AWS. Either way the same core
// (commands.ts) produces the same OpsResponse; this file only chooses the transport and prints.
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { EXIT, OpsError, UsageError } from './errors.ts';
import { forwardedArgv, isAction, parseInvocation, usage, type Invocation } from './parse.ts';
import { render } from './render.ts';
import { failure, type OpsResponse } from './response.ts';

// The database, Stripe and AWS clients are loaded only once the arguments are known to be good:
// a typo is answered at once instead of after a second of module loading.

import { osUser, targetOf, type CliIo } from './target.ts';

export type { CliIo, Target } from './target.ts';
export { osUser, targetOf } from './target.ts';

const stdio: CliIo = { out: (l) => process.stdout.write(`${l}\n`), err: (l) => process.stderr.write(`${l}\n`) };

/** Runs the CLI and returns its exit status. Exported for tests; the script entry is at the bottom. */
export async function main(argv: readonly string[], env: NodeJS.ProcessEnv = process.env, io: CliIo = stdio): Promise<number> {
  // The live page: a server that runs the commands below for a browser (live-page/cli.ts).
  if (argv[0] === 'ui') {
    const { runUi } = await import('./live-page/cli.ts');
    return runUi(argv.slice(1), env, io);
  }
  let invocation: Invocation;
  try {
    invocation = parseInvocation(argv, osUser(env));
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    const response = failure(null, error);
    const json = argv.includes('--json');
    print(render(response, json), io);
    if (!json && argv.length === 0) io.err('Commands: review list|show|resolve|reissue|note, operations show, rejected list, stats, ui (the live page)');
    return response.exitCode;
  }

  if (invocation.command.name === 'help') {
    print(render({ ok: true, exitCode: 0, command: 'help', result: { usage: usage(invocation.command.topic) } }, invocation.json), io);
    return EXIT.ok;
  }

  const target = targetOf(invocation, env);
  io.err(target.banner);
  if (target.deployed && isAction(invocation.command) && !invocation.confirmed) {
    const refused = failure(
      invocation.command.name,
      new UsageError(`${invocation.command.name} writes to a deployed pipeline (the target above): check it, then run the command again with --yes`),
    );
    print(render(refused, invocation.json), io);
    return refused.exitCode;
  }

  let response: OpsResponse;
  let close = async () => {};
  try {
    if (!invocation.transport.lambda) {
      const [{ runCommand }, { directContext }] = await Promise.all([import('./commands.ts'), import('./direct.ts')]);
      const direct = directContext(env);
      close = direct.close;
      response = await runCommand(invocation.command, direct.context);
    } else {
      const { invokeOpsFunction } = await import('./lambda-client.ts');
      response = await invokeOpsFunction(
        { functionName: invocation.transport.lambda!, region: invocation.transport.region ?? env.AWS_REGION, endpoint: invocation.transport.endpoint },
        forwardedArgv(invocation),
        env,
      );
    }
  } catch (error) {
    // Not a refusal: the database, the network or the function failed. Nothing is known to have changed.
    if (error instanceof OpsError) response = failure(invocation.command.name, error);
    else {
      io.err(`error: ${firstLine(error)}`);
      return EXIT.refused;
    }
  } finally {
    await close();
  }
  print(render(response, invocation.json), io);
  return response.exitCode;
}

function print(rendered: { stdout: readonly string[]; stderr: readonly string[] }, io: CliIo): void {
  for (const line of rendered.stdout) io.out(line);
  for (const line of rendered.stderr) io.err(line);
}

function firstLine(error: unknown): string {
  const text = error instanceof Error ? `${error.message}` : String(error);
  return text.split('\n')[0] ?? text;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  process.exitCode = await main(process.argv.slice(2));
}
