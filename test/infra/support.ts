// Synthesizes the pipeline for the infrastructure tests: bundling skipped (the template, not the
// bundles, is under test), the feature flags of cdk.json (so the template is the one `cdk synth`
// makes), CloudFormation's built-in validation off except where a test asks for it (it costs ~4 s
// per synth), and every cloud assembly in a temporary cdk.out* folder removed afterwards.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as cdk from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import type { IConstruct } from 'constructs';
import { ChargePipeline } from '../../lib/charge-pipeline.ts';
import type { ChargePipelineProps } from '../../lib/charge-pipeline-props.ts';
import { ChargePipelineStack, stackNameFor } from '../../lib/charge-pipeline-stack.ts';
import { settingsFromContext } from '../../lib/config.ts';
import { PROJECT_ROOT } from '../../lib/pipeline-function.ts';
import { acknowledgeAppFindings } from '../../bin/acknowledgements.ts';

export const CDK_JSON = JSON.parse(readFileSync(path.join(PROJECT_ROOT, 'cdk.json'), 'utf8')) as {
  app: string;
  notices?: boolean;
  context: Record<string, unknown>;
};

const outdirs: string[] = [];

export interface AppOptions {
  readonly context?: Record<string, unknown>;
  /** Bundle with esbuild (slow; only for the bundling test). @default false */
  readonly bundling?: boolean;
  /** Run CloudFormation's built-in template validation during synth. @default false */
  readonly builtinValidation?: boolean;
}

export function newApp(options: AppOptions = {}): cdk.App {
  const outdir = mkdtempSync(path.join(os.tmpdir(), 'cdk.out-infra-test-'));
  outdirs.push(outdir);
  return new cdk.App({
    outdir,
    builtinCloudFormationValidation: options.builtinValidation ?? false,
    context: {
      ...CDK_JSON.context,
      ...(options.bundling ? {} : { 'aws:cdk:bundling-stacks': [] }),
      ...options.context,
    },
  });
}

export function removeSynthOutput(): void {
  for (const dir of outdirs.splice(0)) rmSync(dir, { recursive: true, force: true });
}

export interface SynthesizedPipeline {
  readonly app: cdk.App;
  readonly stack: cdk.Stack;
  readonly pipeline: ChargePipeline;
  readonly template: Template;
  readonly resources: Record<string, CfnResource>;
}

export interface CfnResource {
  readonly Type: string;
  readonly Properties?: Record<string, any>;
  readonly DependsOn?: string | string[];
  readonly DeletionPolicy?: string;
  readonly UpdateReplacePolicy?: string;
}

/**
 * The construct alone, embedded in a plain stack (as a user's app would). Props that reference
 * other constructs (an imported role or secret) are made by a function of the stack.
 */
export function synthPipeline(
  props: ChargePipelineProps | ((stack: cdk.Stack) => ChargePipelineProps) = {},
  options: AppOptions = {},
): SynthesizedPipeline {
  const app = newApp(options);
  const stack = new cdk.Stack(app, 'EmbeddingStack');
  const pipeline = new ChargePipeline(stack, 'Charges', typeof props === 'function' ? props(stack) : props);
  return finish(app, stack, pipeline);
}

/** What bin/app.ts builds, from CDK context (the `-c` values of a deploy command). */
export function synthDefaultApp(context: Record<string, unknown> = {}, options: AppOptions = {}): SynthesizedPipeline {
  const app = newApp({ ...options, context });
  const settings = settingsFromContext((key) => app.node.tryGetContext(key));
  const stack = new ChargePipelineStack(app, stackNameFor(settings.environment), {
    settings,
    tags: { application: 'charge-pipeline', environment: settings.environment },
  });
  // What bin/app.ts acknowledges (the construct acknowledges nothing itself).
  acknowledgeAppFindings(app, stack.pipeline, settings.environment);
  return finish(app, stack, stack.pipeline);
}

function finish(app: cdk.App, stack: cdk.Stack, pipeline: ChargePipeline): SynthesizedPipeline {
  const template = Template.fromStack(stack);
  return { app, stack, pipeline, template, resources: template.toJSON().Resources as Record<string, CfnResource> };
}

/** The logical id CloudFormation knows a construct (or its default child) by. */
export function logicalId(construct: IConstruct): string {
  const element = cdk.CfnElement.isCfnElement(construct) ? construct : construct.node.defaultChild;
  if (!element || !cdk.CfnElement.isCfnElement(element)) throw new Error(`${construct.node.path} has no CloudFormation element`);
  return cdk.Stack.of(construct).getLogicalId(element);
}

export function ofType(resources: Record<string, CfnResource>, type: string): [string, CfnResource][] {
  return Object.entries(resources).filter(([, resource]) => resource.Type === type);
}

export function dependsOn(resource: CfnResource): string[] {
  const value = resource.DependsOn;
  return value === undefined ? [] : Array.isArray(value) ? value : [value];
}

/** Every IAM policy statement in the template (inline role policies and AWS::IAM::Policy). */
export function policyStatements(resources: Record<string, CfnResource>): { owner: string; statement: any }[] {
  const out: { owner: string; statement: any }[] = [];
  for (const [id, resource] of Object.entries(resources)) {
    const documents: any[] = [];
    if (resource.Type === 'AWS::IAM::Policy' || resource.Type === 'AWS::IAM::ManagedPolicy') {
      documents.push(resource.Properties?.PolicyDocument);
    }
    if (resource.Type === 'AWS::IAM::Role') {
      for (const policy of resource.Properties?.Policies ?? []) documents.push(policy.PolicyDocument);
    }
    for (const document of documents) {
      for (const statement of document?.Statement ?? []) out.push({ owner: id, statement });
    }
  }
  return out;
}

export function asArray<T>(value: T | T[] | undefined): T[] {
  return value === undefined ? [] : Array.isArray(value) ? value : [value];
}
