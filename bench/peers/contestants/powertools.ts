// Contestant 2: Powertools for AWS Lambda, configured as its documentation shows for SQS FIFO with
// idempotency ("Batch processing" → "Integration with Idempotency"): SqsFifoPartialProcessorAsync,
// each record through makeIdempotent with a DynamoDBPersistenceLayer, the Lambda context registered
// so that an in-progress record expires with the invocation. The order id is the idempotency key
// (eventKeyJmesPath) and Stripe's Idempotency-Key. It has no reconciler. DynamoDB is dynalite.
import { createHash, randomBytes } from 'node:crypto';
import { processPartialResponse, SqsFifoPartialProcessorAsync } from '@aws-lambda-powertools/batch';
import { IdempotencyConfig, makeIdempotent } from '@aws-lambda-powertools/idempotency';
import { DynamoDBPersistenceLayer } from '@aws-lambda-powertools/idempotency/dynamodb';
import { CreateTableCommand, DynamoDBClient, paginateScan } from '@aws-sdk/client-dynamodb';
import { unmarshall } from '@aws-sdk/util-dynamodb';
import type { Context, SQSRecord } from 'aws-lambda';
import type { ChargeRequest } from '../../../lambdas/payments/message.ts';
import { paymentIntentParams, type Contestant } from '../contestant.ts';
import type { Belief } from '../truth.ts';

/** Powertools' key: `<prefix>#<md5 base64 of the JSON of the selected value>` (BasePersistenceLayer). */
export function powertoolsKeyHash(orderId: string): string {
  return createHash('md5').update(JSON.stringify(orderId)).digest('base64');
}

/**
 * skipGroupOnError: the FIFO processor's default (false) fails every record after the first failure
 * of a batch, to keep order across groups; every order here is a group of its own, so the option the
 * Powertools docs give for "proceed with processing messages from a different group ID" is the
 * right one. Both are measured: the default sends innocent neighbours of a failing record to the DLQ.
 */
function powertoolsContestant(id: 'powertools' | 'powertools-default', skipGroupOnError: boolean): Contestant {
  return {
    id,
    title: skipGroupOnError ? 'Powertools idempotency, FIFO skipGroupOnError' : 'Powertools idempotency, FIFO default',
    store: 'dynamodb',
    async start(ctx) {
      const client = new DynamoDBClient({
        endpoint: ctx.dynamoEndpoint,
        region: 'us-east-1',
        credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
      });
      const tableName = `idempotency-${randomBytes(4).toString('hex')}`;
      await client.send(
        new CreateTableCommand({
          TableName: tableName,
          AttributeDefinitions: [{ AttributeName: 'id', AttributeType: 'S' }],
          KeySchema: [{ AttributeName: 'id', KeyType: 'HASH' }],
          BillingMode: 'PAY_PER_REQUEST',
        }),
      );
      const persistenceStore = new DynamoDBPersistenceLayer({ tableName, awsSdkV3Client: client });
      const config = new IdempotencyConfig({ eventKeyJmesPath: 'powertools_json(body).orderId' });
      const processor = new SqsFifoPartialProcessorAsync();
      const stripe = ctx.stripe();

      const recordHandler = async (record: SQSRecord) => {
        const order = JSON.parse(record.body) as ChargeRequest;
        try {
          const pi = await stripe.paymentIntents.create(
            paymentIntentParams(order),
            { idempotencyKey: order.orderId },
          );
          return { orderId: order.orderId, status: pi.status, paymentIntentId: pi.id, finishedAtMs: Date.now() };
        } catch (error) {
          // A decline is an answer, stored like a success; anything else fails the record: Powertools
          // deletes the in-progress record and SQS delivers the message again.
          if ((error as { type?: string }).type === 'StripeCardError') return { orderId: order.orderId, status: 'failed', paymentIntentId: null, finishedAtMs: Date.now() };
          throw error;
        }
      };
      const processIdempotently = makeIdempotent(recordHandler, { persistenceStore, config });

      return {
        charge: async (event, context: Context) => {
          config.registerLambdaContext(context);
          return processPartialResponse(event, processIdempotently, processor, { context, skipGroupOnError });
        },
        reconcile: null,
        async beliefs(orderIds) {
          const byHash = new Map<string, Belief>();
          const out = new Map<string, Belief>();
          for await (const page of paginateScan({ client }, { TableName: tableName })) {
            for (const raw of page.Items ?? []) {
              const item = unmarshall(raw) as { id: string; status: string; data?: { orderId: string; status: string; finishedAtMs: number } };
              if (item.status === 'COMPLETED' && item.data) {
                const s = item.data.status;
                const state = s === 'succeeded' ? 'succeeded' : s === 'failed' || s === 'requires_payment_method' || s === 'canceled' ? 'failed' : 'open';
                out.set(item.data.orderId, { state, finishedAtMs: state === 'open' ? null : item.data.finishedAtMs });
              } else {
                // INPROGRESS (its invocation died): the key names the order only through its hash.
                byHash.set(item.id.split('#').at(-1)!, { state: 'open', finishedAtMs: null });
              }
            }
          }
          for (const orderId of orderIds) {
            const belief = byHash.get(powertoolsKeyHash(orderId));
            if (belief && !out.has(orderId)) out.set(orderId, belief);
          }
          return out;
        },
        stop: async () => client.destroy(),
      };
    },
  };
}

export const powertools = powertoolsContestant('powertools', true);
export const powertoolsDefault = powertoolsContestant('powertools-default', false);
