// Run the fake EventBridge on its own: `npx tsx local/fake-eventbridge/cli.ts --port 4010 --drop-rate 0.1`.
// Point the real SDK at it with `new EventBridgeClient({ endpoint: 'http://127.0.0.1:4010', region,
// credentials })`. GET /_fake/events and /_fake/calls show what it recorded.
import { parseArgs } from 'node:util';
import { startFakeEventBridge, type FaultRates } from './server.ts';

const USAGE = `Usage: npx tsx local/fake-eventbridge/cli.ts [options]

A local PutEvents endpoint (AWS JSON 1.1) for the real @aws-sdk/client-eventbridge.

  --port <n>                 default 4010 (0 = any free port)
  --host <addr>              default 127.0.0.1
  --entry-failure-rate <p>   probability that an entry fails (InternalFailure / ThrottlingException)
  --call-error-rate <p>      probability that a call answers 500 InternalException
  --drop-rate <p>            probability that a call is accepted and its response dropped
  --seed <n>                 PRNG seed for the rates (default 1): same seed, same faults
  --allow-default-bus        accept entries without EventBusName (AWS would use "default")
  --quiet                    do not log each call
  -h, --help`;

function main(): void {
  let values;
  try {
    ({ values } = parseArgs({
      options: {
        port: { type: 'string', default: '4010' },
        host: { type: 'string', default: '127.0.0.1' },
        'entry-failure-rate': { type: 'string' },
        'call-error-rate': { type: 'string' },
        'drop-rate': { type: 'string' },
        seed: { type: 'string' },
        'allow-default-bus': { type: 'boolean', default: false },
        quiet: { type: 'boolean', default: false },
        help: { type: 'boolean', short: 'h' },
      },
      strict: true,
      allowPositionals: false,
    }));
  } catch (error) {
    process.stderr.write(`error: ${error instanceof Error ? error.message : String(error)}\n${USAGE}\n`);
    process.exitCode = 2;
    return;
  }
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  const number = (flag: string, value: string | undefined, max = Infinity): number | undefined => {
    if (value === undefined) return undefined;
    const n = Number(value);
    if (!Number.isFinite(n) || n < 0 || n > max) {
      process.stderr.write(`error: ${flag} must be a number between 0 and ${max}\n`);
      process.exit(2);
    }
    return n;
  };
  const rates: FaultRates = {
    seed: number('--seed', values.seed) ?? 1,
    entryFailure: number('--entry-failure-rate', values['entry-failure-rate'], 1) ?? 0,
    callError: number('--call-error-rate', values['call-error-rate'], 1) ?? 0,
    dropResponse: number('--drop-rate', values['drop-rate'], 1) ?? 0,
  };
  const quiet = values.quiet;
  void startFakeEventBridge({
    port: number('--port', values.port, 65_535) ?? 4010,
    host: values.host,
    requireEventBusName: !values['allow-default-bus'],
    faultRates: rates,
    onCall: (call, events) => {
      if (quiet) return;
      const what = events.map((e) => `${e.eventBusName}/${e.detailType}`).join(', ');
      process.stdout.write(
        `${call.receivedAt.toISOString()} #${call.id} ${call.operation} ${call.outcome} status=${call.status}` +
          ` entries=${call.entryCount} failed=${call.failedEntryCount}${call.errorCode ? ` ${call.errorCode}` : ''}${what ? ` [${what}]` : ''}\n`,
      );
    },
  }).then((fake) => {
    process.stdout.write(`fake EventBridge listening on ${fake.url}\n`);
    const stop = () => void fake.close().then(() => process.exit(0));
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
}

main();
