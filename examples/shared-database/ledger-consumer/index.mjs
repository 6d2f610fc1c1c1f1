// A team's own outcome consumer, already bundled (no dependency, so the bundle is this file): it
// reads the batch of outcome events and reports none as failed. A real one is built with esbuild
// from the team's project (OutcomeConsumer `entry` does that at synth) or in its own CI (`code`).
export const handler = async (event) => {
  for (const record of event.Records ?? []) {
    const outcome = JSON.parse(record.body);
    console.log(JSON.stringify({ message: 'outcome', detailType: outcome['detail-type'], id: outcome.id }));
  }
  return { batchItemFailures: [] };
};
