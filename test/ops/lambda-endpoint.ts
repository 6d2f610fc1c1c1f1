// A local stand-in for the Lambda Invoke API (POST /2015-03-31/functions/{name}/invocations), enough
// for the real @aws-sdk/client-lambda to call a handler in this process: the CLI's --lambda mode is
// then tested through the SDK's real request, response and FunctionError handling.
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Context } from 'aws-lambda';

export type LocalFunction = (event: unknown, context: Context) => Promise<unknown>;

export interface LambdaEndpoint {
  readonly url: string;
  readonly invocations: { readonly functionName: string; readonly event: unknown; readonly requestId: string }[];
  close(): Promise<void>;
}

function contextFor(functionName: string, requestId: string): Context {
  return {
    callbackWaitsForEmptyEventLoop: true,
    functionName,
    functionVersion: '$LATEST',
    invokedFunctionArn: `arn:aws:lambda:us-east-1:000000000000:function:${functionName}`,
    memoryLimitInMB: '256',
    awsRequestId: requestId,
    logGroupName: `/aws/lambda/${functionName}`,
    logStreamName: 'local',
    getRemainingTimeInMillis: () => 60_000,
    done: () => {},
    fail: () => {},
    succeed: () => {},
  };
}

export async function startLambdaEndpoint(functions: Readonly<Record<string, LocalFunction>>): Promise<LambdaEndpoint> {
  const invocations: LambdaEndpoint['invocations'] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      void (async () => {
        const m = /^\/2015-03-31\/functions\/([^/]+)\/invocations$/.exec(req.url?.split('?')[0] ?? '');
        const name = m ? decodeURIComponent(m[1]!) : '';
        const fn = functions[name];
        if (req.method !== 'POST' || !fn) {
          res.writeHead(404, { 'content-type': 'application/json', 'x-amzn-errortype': 'ResourceNotFoundException' });
          res.end(JSON.stringify({ Type: 'User', message: `Function not found: ${name}` }));
          return;
        }
        const requestId = randomUUID();
        const event: unknown = JSON.parse(Buffer.concat(chunks).toString('utf8') || 'null');
        invocations.push({ functionName: name, event, requestId });
        const headers = { 'content-type': 'application/json', 'x-amz-executed-version': '$LATEST', 'x-amzn-requestid': requestId };
        try {
          const answer = await fn(event, contextFor(name, requestId));
          res.writeHead(200, headers);
          res.end(JSON.stringify(answer));
        } catch (error) {
          const e = error instanceof Error ? error : new Error(String(error));
          res.writeHead(200, { ...headers, 'x-amz-function-error': 'Unhandled' });
          res.end(JSON.stringify({ errorType: e.name, errorMessage: e.message, trace: [] }));
        }
      })();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    invocations,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.closeAllConnections();
        server.close((error) => (error ? reject(error) : resolve()));
      }),
  };
}
