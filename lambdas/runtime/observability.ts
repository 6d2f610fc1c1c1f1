// Logging and metrics shared by the handlers: Powertools Logger (JSON lines) and Metrics (EMF), named
// and configured from the environment with the stack's defaults (PIPELINE), plus the two rules that
// keep secrets and card data out of the logs:
//   1. raw errors are never handed to the logger: Powertools prints every enumerable field of an
//      error, and a pg error's `detail` quotes the failing row (payment method included);
//   2. every error text we do print goes through redact().
//
// Silencing locally: POWERTOOLS_LOG_LEVEL=SILENT stops the log lines; POWERTOOLS_METRICS_DISABLED=true
// stops the EMF lines (Powertools 2.36 reads both; POWERTOOLS_DEV=true also disables metrics).
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import type { Context } from 'aws-lambda';
import { PIPELINE } from './settings.ts';

const blank = (value: string | undefined) => (value === undefined || value === '' ? undefined : value);

export function createLogger(): Logger {
  return new Logger({ serviceName: blank(process.env.POWERTOOLS_SERVICE_NAME) ?? PIPELINE.serviceName });
}

/**
 * Namespace and dimensions as the CDK alarms expect them (lib/observability.ts, pipelineMetrics):
 * service, plus pipeline = PIPELINE_NAME when the stack sets it, so that two pipelines in one account
 * and region publish distinct metrics (locally unset: service only).
 */
export function createMetrics(env: Readonly<Record<string, string | undefined>> = process.env): Metrics {
  const pipelineName = blank(env.PIPELINE_NAME);
  return new Metrics({
    namespace: blank(env.POWERTOOLS_METRICS_NAMESPACE) ?? PIPELINE.metricsNamespace,
    serviceName: blank(env.POWERTOOLS_SERVICE_NAME) ?? PIPELINE.serviceName,
    ...(pipelineName ? { defaultDimensions: { pipeline: pipelineName } } : {}),
  });
}

/** The part of a logger the domain code needs (Powertools' Logger satisfies it; tests pass their own). */
export interface LogSink {
  debug(message: string, ...attributes: Record<string, unknown>[]): void;
  info(message: string, ...attributes: Record<string, unknown>[]): void;
  warn(message: string, ...attributes: Record<string, unknown>[]): void;
  error(message: string, ...attributes: Record<string, unknown>[]): void;
}

export const silentLog: LogSink = { debug() {}, info() {}, warn() {}, error() {} };

// Moved to redact.ts (no Powertools there, so that plain domain code can use them); re-exported.
export { describeError, redact } from './redact.ts';

/** The invocation's clock: how much time Lambda leaves us. */
export interface InvocationClock {
  remainingMs(): number;
}

/**
 * From the Lambda context. A caller without one (a script, a local runner that passes {}) gets the
 * given fallback, measured from now.
 */
export function clockFromContext(context: Partial<Pick<Context, 'getRemainingTimeInMillis'>> | undefined, fallbackMs: number): InvocationClock {
  if (typeof context?.getRemainingTimeInMillis === 'function') {
    const get = context.getRemainingTimeInMillis.bind(context);
    return { remainingMs: () => get() };
  }
  const deadline = Date.now() + fallbackMs;
  return { remainingMs: () => deadline - Date.now() };
}
