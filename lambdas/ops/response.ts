// The one document both entry points answer with — `npm run ops -- … --json` prints it, the ops
// Lambda returns it — and the failure half of it. Kept apart from the commands so that the CLI can
// report a bad argument without loading the database and Stripe clients.
import { EXIT, type ErrorCode, type OpsError } from './errors.ts';
import type { CommandName } from './parse.ts';
import type { ResultOf } from './results.ts';

export type ResponseCommand = keyof ResultOf;

export type OpsResponse =
  | { [K in ResponseCommand]: { readonly ok: true; readonly exitCode: 0; readonly command: K; readonly result: ResultOf[K] } }[ResponseCommand]
  | {
      readonly ok: false;
      /** 1: refused or could not be completed (nothing changed); 2: bad arguments or configuration. */
      readonly exitCode: 1 | 2;
      readonly command: CommandName | null;
      readonly error: { readonly code: ErrorCode; readonly name: string; readonly message: string; readonly details?: Readonly<Record<string, unknown>> };
    };

export function failure(command: CommandName | null, error: OpsError): OpsResponse {
  return {
    ok: false,
    exitCode: error.exitCode === EXIT.usage ? 2 : 1,
    command,
    error: { code: error.code, name: error.name, message: error.message, ...(error.details ? { details: error.details } : {}) },
  };
}
