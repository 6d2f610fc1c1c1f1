// Stripe events in, as synthesized: the webhook door (Function URL, signing secret created empty,
// least privilege, outputs), the EventBridge door (a rule on the partner bus with a DLQ), and none.
import { afterAll, describe, expect, it } from 'vitest';
import { SUBSCRIBED_EVENT_TYPES } from '../../lambdas/payments/event-decisions.ts';
import { asArray, logicalId, ofType, policyStatements, removeSynthOutput, synthPipeline } from './support.ts';

afterAll(removeSynthOutput);

const PARTNER_BUS = 'aws.partner/stripe.com/ed_61SZqWQdxLbHL7HgR16SSVRnAtwSQLqJc2eTb0fj8Kpk';

describe('stripeEvents: webhook (the default)', () => {
  const { pipeline, resources, template } = synthPipeline();
  const fnId = logicalId(pipeline.stripeEvents!.function);
  const fn = resources[fnId]!;

  it('is one function behind a Function URL with auth NONE (the Stripe signature is the authentication)', () => {
    const urls = ofType(resources, 'AWS::Lambda::Url');
    expect(urls).toHaveLength(1);
    expect(urls[0]![1].Properties).toMatchObject({ AuthType: 'NONE', InvokeMode: 'BUFFERED', TargetFunctionArn: { 'Fn::GetAtt': [fnId, 'Arn'] } });
    expect(fn.Properties!.Environment.Variables).toMatchObject({
      STRIPE_EVENTS_INPUT: 'webhook',
      STRIPE_WEBHOOK_SECRET_ARN: { Ref: logicalId(pipeline.stripeEvents!.webhookSecret as never) },
      // Stripe waits for the answer: the inline retrieve is one short attempt
      STRIPE_TIMEOUT_MS: '5000',
      STRIPE_MAX_NETWORK_RETRIES: '0',
    });
    expect(fn.Properties).toMatchObject({ Runtime: 'nodejs24.x', Architectures: ['arm64'], Timeout: 30 });
  });

  it('the public may call the URL only: the one lambda:InvokeFunction for everyone is conditioned on InvokedViaFunctionUrl', () => {
    const publicPermissions = ofType(resources, 'AWS::Lambda::Permission')
      .map(([, p]) => p.Properties!)
      .filter((p) => p.Principal === '*' && JSON.stringify(p.FunctionName).includes(fnId));
    expect(publicPermissions).toHaveLength(2);
    expect(publicPermissions).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ Action: 'lambda:InvokeFunctionUrl', FunctionUrlAuthType: 'NONE' }),
        expect.objectContaining({ Action: 'lambda:InvokeFunction', InvokedViaFunctionUrl: true }),
      ]),
    );
  });

  it('creates the signing secret empty: the whsec_… never passes through the template', () => {
    const secret = resources[logicalId(pipeline.stripeEvents!.webhookSecret as never)]!;
    expect(secret.Properties!.SecretString).toBe('{"secret":""}');
    expect(JSON.stringify(fn.Properties!.Environment)).not.toMatch(/whsec_/);
  });

  it('only the Stripe-events function may read the signing secret', () => {
    const secretId = logicalId(pipeline.stripeEvents!.webhookSecret as never);
    const readers = policyStatements(resources)
      .filter(({ statement }) => JSON.stringify(statement.Resource ?? '').includes(secretId))
      .flatMap(({ owner }) => asArray<{ Ref: string }>(resources[owner]!.Properties!.Roles).map((r) => r.Ref));
    expect([...new Set(readers)]).toEqual([logicalId(pipeline.stripeEvents!.function.role!)]);
  });

  it('reads the application role\'s secret (never the owner\'s), the Stripe key and the signing secret, and publishes on the bus', () => {
    const role = logicalId(pipeline.stripeEvents!.function.role!);
    const statements = policyStatements(resources)
      .filter(({ owner }) => JSON.stringify(resources[owner]!.Properties!.Roles ?? []).includes(role))
      .map(({ statement }) => statement);
    const read = statements.filter((s) => JSON.stringify(s.Action).includes('secretsmanager:GetSecretValue')).flatMap((s) => asArray(s.Resource));
    expect(read).toEqual(
      expect.arrayContaining([
        { Ref: logicalId(pipeline.applicationDatabaseSecret) },
        { Ref: logicalId(pipeline.stripeSecret.node.defaultChild!) },
        { Ref: logicalId(pipeline.stripeEvents!.webhookSecret as never) },
      ]),
    );
    expect(read).toHaveLength(3);
    expect(JSON.stringify(statements)).not.toContain(logicalId(pipeline.databaseSecret));
    expect(fn.Properties!.Environment.Variables.DB_SECRET_ARN).toEqual({ Ref: logicalId(pipeline.applicationDatabaseSecret) });
    expect(statements).toContainEqual({ Action: 'events:PutEvents', Effect: 'Allow', Resource: { 'Fn::GetAtt': [logicalId(pipeline.eventBus), 'Arn'] } });
  });

  it('outputs the endpoint URL and exactly the events to subscribe to', () => {
    const outputs = template.toJSON().Outputs as Record<string, { Value: unknown; Description: string }>;
    const url = Object.entries(outputs).find(([id]) => id.includes('WebhookUrl'));
    expect(url?.[1].Value).toEqual({ 'Fn::GetAtt': [expect.stringContaining('StripeEventsFunctionFunctionUrl'), 'FunctionUrl'] });
    const events = Object.entries(outputs).find(([id]) => id.includes('SubscribedEvents'));
    expect(events?.[1].Value).toBe(SUBSCRIBED_EVENT_TYPES.join(','));
    expect(SUBSCRIBED_EVENT_TYPES).toEqual([
      'payment_intent.succeeded', 'payment_intent.payment_failed', 'payment_intent.canceled', 'payment_intent.processing',
      'payment_intent.requires_action', 'charge.refunded', 'charge.dispute.created', 'charge.dispute.closed',
      'refund.created', 'refund.updated', 'refund.failed', 'charge.refund.updated',
    ]);
  });

  it('runs after the migrations, like every function that touches the schema', () => {
    const dependsOn = asArray<string>(fn.DependsOn as string | string[] | undefined);
    expect(dependsOn.some((id) => id.includes('Migrations'))).toBe(true);
  });

  it('caps its concurrency by default (a flood on the anonymous URL takes neither the account\'s concurrency nor the database\'s connections), as asked, or not at all', () => {
    expect(fn.Properties!.ReservedConcurrentExecutions).toBe(10);
    const capped = synthPipeline({ stripeEventsReservedConcurrency: 4 });
    expect(capped.resources[logicalId(capped.pipeline.stripeEvents!.function)]!.Properties!.ReservedConcurrentExecutions).toBe(4);
    const unreserved = synthPipeline({ stripeEventsReservedConcurrency: 'unreserved' });
    expect(unreserved.resources[logicalId(unreserved.pipeline.stripeEvents!.function)]!.Properties!.ReservedConcurrentExecutions).toBeUndefined();
  });
});

describe('stripeConnectedAccounts', () => {
  it('reaches the two appliers of Stripe events (the receiver\'s inline apply, the reconciler\'s sweep) as STRIPE_CONNECTED_ACCOUNTS, and no other function; none by default', () => {
    const vars = (synth: ReturnType<typeof synthPipeline>, fn: Parameters<typeof logicalId>[0]): Record<string, unknown> =>
      synth.resources[logicalId(fn)]!.Properties!.Environment.Variables;
    const accounts = synthPipeline({ stripeConnectedAccounts: ['acct_1Alpha', 'acct_1Bravo', 'acct_1Alpha'] });
    const p = accounts.pipeline;
    for (const fn of [p.stripeEvents!.function, p.reconcileFunction]) expect(vars(accounts, fn)).toMatchObject({ STRIPE_CONNECTED_ACCOUNTS: 'acct_1Alpha,acct_1Bravo' });
    for (const fn of [p.chargeFunction, p.opsFunction, p.migrateFunction]) expect(vars(accounts, fn)).not.toHaveProperty('STRIPE_CONNECTED_ACCOUNTS');
    const base = synthPipeline();
    for (const fn of [base.pipeline.stripeEvents!.function, base.pipeline.reconcileFunction]) expect(vars(base, fn)).not.toHaveProperty('STRIPE_CONNECTED_ACCOUNTS');
  });

  it('an invalid account id fails the synth, saying which entry and what is expected', () => {
    expect(() => synthPipeline({ stripeConnectedAccounts: ['acct_1Alpha', 'acct_1 Bravo'] })).toThrow(
      /Invalid ChargePipeline props:[\s\S]*stripeConnectedAccounts\[1\] must be a Stripe account id \(acct_ and 1-64 letters or digits\), got "acct_1 Bravo"/,
    );
  });
});

describe('stripeEvents: eventbridge', () => {
  const { pipeline, resources, template } = synthPipeline({ stripeEvents: 'eventbridge', stripePartnerEventBusName: PARTNER_BUS });
  const fnId = logicalId(pipeline.stripeEvents!.function);

  it('a rule on the partner bus, for the subscribed types, targets the same function, with a DLQ', () => {
    const rules = ofType(resources, 'AWS::Events::Rule').filter(([, r]) => r.Properties!.EventBusName === PARTNER_BUS);
    expect(rules).toHaveLength(1);
    const rule = rules[0]![1].Properties!;
    expect(rule.EventPattern).toEqual({ source: [{ prefix: 'aws.partner/stripe.com/' }], 'detail-type': [...SUBSCRIBED_EVENT_TYPES] });
    expect(rule.Targets[0]).toMatchObject({ Arn: { 'Fn::GetAtt': [fnId, 'Arn'] }, DeadLetterConfig: { Arn: { 'Fn::GetAtt': [logicalId(pipeline.stripeEvents!.deadLetterQueue!), 'Arn'] } } });
    expect(resources[fnId]!.Properties!.Environment.Variables).toMatchObject({ STRIPE_EVENTS_INPUT: 'eventbridge', STRIPE_PARTNER_EVENT_SOURCE: PARTNER_BUS });
  });

  it('keeps what the function could not take after Lambda\'s retries: an on-failure destination on the same queue as the rule\'s DLQ', () => {
    const queueId = logicalId(pipeline.stripeEvents!.deadLetterQueue!);
    const configs = ofType(resources, 'AWS::Lambda::EventInvokeConfig').filter(([, c]) => JSON.stringify(c.Properties!.FunctionName).includes(fnId));
    expect(configs).toHaveLength(1);
    expect(configs[0]![1].Properties).toMatchObject({
      MaximumRetryAttempts: 2,
      MaximumEventAgeInSeconds: 6 * 3600,
      DestinationConfig: { OnFailure: { Destination: { 'Fn::GetAtt': [queueId, 'Arn'] } } },
    });
    // the function may send to it (Lambda sends the invocation record as the function's role)
    const role = logicalId(pipeline.stripeEvents!.function.role!);
    const sends = policyStatements(resources)
      .filter(({ owner }) => JSON.stringify(resources[owner]!.Properties!.Roles ?? []).includes(role))
      .map(({ statement }) => statement)
      .filter((st) => asArray(st.Action).includes('sqs:SendMessage'));
    expect(sends.flatMap((st) => asArray(st.Resource))).toContainEqual({ 'Fn::GetAtt': [queueId, 'Arn'] });
    // kept 14 days, and not deleted with the stack under the default removal policy
    expect(resources[queueId]).toMatchObject({ Properties: { MessageRetentionPeriod: 14 * 24 * 3600 }, DeletionPolicy: 'Retain' });
  });

  it('outputs the failure queue and the function the redrive replays into', () => {
    const outputs = template.toJSON().Outputs as Record<string, { Value: unknown }>;
    const value = (part: string) => Object.entries(outputs).find(([id]) => id.includes(part))?.[1].Value;
    expect(value('PartnerEventFailureQueueUrl')).toEqual({ Ref: logicalId(pipeline.stripeEvents!.deadLetterQueue!) });
    expect(value('StripeEventsFunctionName')).toEqual({ Ref: fnId });
  });

  it('no Function URL and no signing secret', () => {
    expect(ofType(resources, 'AWS::Lambda::Url')).toHaveLength(0);
    expect(pipeline.stripeEvents!.webhookSecret).toBeUndefined();
  });

  it('refuses to synthesize without the partner bus, saying what to set', () => {
    expect(() => synthPipeline({ stripeEvents: 'eventbridge' })).toThrow(/stripePartnerEventBusName/);
    expect(() => synthPipeline({ stripeEvents: 'eventbridge', stripePartnerEventBusName: 'default' })).toThrow(/aws.partner\/stripe.com/);
  });
});

describe('stripeEvents: none (polling only)', () => {
  it('makes no function, no URL, no secret, and no Stripe-events alarm', () => {
    const { pipeline, resources } = synthPipeline({ stripeEvents: 'none' });
    expect(pipeline.stripeEvents).toBeUndefined();
    expect(ofType(resources, 'AWS::Lambda::Url')).toHaveLength(0);
    expect(pipeline.alarms.map((a) => a.name)).not.toContain('StripeWebhookRejected');
  });
});
