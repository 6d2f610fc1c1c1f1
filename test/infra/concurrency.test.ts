// Reserved concurrency that protects the charge path, as synthesized: the charge function keeps the
// account concurrency its event source may use, the Stripe-events function behind the anonymous URL
// is capped, both settable from the construct and from the default app's context, and a combination
// the database's connections cannot hold is refused at synth with what to change.
import { afterAll, describe, expect, it } from 'vitest';
import { DeploymentSettingsError } from '../../lib/config.ts';
import { ChargePipelinePropsError } from '../../lib/validation.ts';
import { logicalId, removeSynthOutput, synthDefaultApp, synthPipeline } from './support.ts';

afterAll(removeSynthOutput);

const reservedOf = (s: ReturnType<typeof synthPipeline>) => ({
  charge: s.resources[logicalId(s.pipeline.chargeFunction)]!.Properties!.ReservedConcurrentExecutions,
  stripeEvents: s.resources[logicalId(s.pipeline.stripeEvents!.function)]!.Properties!.ReservedConcurrentExecutions,
});

describe('reserved concurrency of the charge and Stripe-events functions', () => {
  it('by default: the charge function reserves its event source\'s maximum concurrency, the Stripe-events function is capped at 10', () => {
    const s = synthPipeline();
    expect(reservedOf(s)).toEqual({ charge: 5, stripeEvents: 10 });
    const [mapping] = Object.values(s.resources).filter((r) => r.Type === 'AWS::Lambda::EventSourceMapping');
    expect(mapping!.Properties!.ScalingConfig).toEqual({ MaximumConcurrency: 5 });
  });

  it('follows chargeMaxConcurrency, and takes the props', () => {
    expect(reservedOf(synthPipeline({ chargeMaxConcurrency: 8 }))).toEqual({ charge: 8, stripeEvents: 10 });
    expect(reservedOf(synthPipeline({ chargeReservedConcurrency: 12, stripeEventsReservedConcurrency: 3 }))).toEqual({ charge: 12, stripeEvents: 3 });
    expect(reservedOf(synthPipeline({ chargeReservedConcurrency: 'unreserved', stripeEventsReservedConcurrency: 'unreserved' }))).toEqual({ charge: undefined, stripeEvents: undefined });
  });

  it('the default app takes them from its context (-c)', () => {
    const s = synthDefaultApp({ chargeReservedConcurrency: '7', stripeEventsReservedConcurrency: '4', databaseMaxConnections: '60' });
    expect(reservedOf(s)).toEqual({ charge: 7, stripeEvents: 4 });
    expect(reservedOf(synthDefaultApp({ stripeEventsReservedConcurrency: 'unreserved' })).stripeEvents).toBeUndefined();
    expect(reservedOf(synthDefaultApp()).stripeEvents).toBe(10);
  });

  it('the default app refuses a value that is neither, and a combination the database cannot hold, saying what to change', () => {
    expect(() => synthDefaultApp({ chargeReservedConcurrency: 'lots' })).toThrow(DeploymentSettingsError);
    expect(() => synthDefaultApp({ chargeReservedConcurrency: 'lots' })).toThrow(/chargeReservedConcurrency must be an integer or 'unreserved', got 'lots'/);
    expect(() => synthDefaultApp({ chargeMaxConcurrency: '10', chargeReservedConcurrency: '6' })).toThrow(ChargePipelinePropsError);
    expect(() => synthDefaultApp({ stripeEventsReservedConcurrency: '50' })).toThrow(/could hold 120 database connections, more than databaseMaxConnections \(80\).*raise databaseMaxConnections/);
  });
});
