// The database: RDS PostgreSQL 18 in isolated subnets, storage encrypted, TLS required by the server
// (rds.force_ssl) and verified by the clients. Each login in its own Secrets Manager secret, each
// rotated: the owner (the master user, used by the migrate function only), the data-only
// application role (migrations/003_application_role.sql) that charge, reconcile and ops use, and
// any outcome consumer's own role (addLogin; ChargePipeline.addConsumerDatabaseLogin).
import * as cdk from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import type * as logs from 'aws-cdk-lib/aws-logs';
import * as rds from 'aws-cdk-lib/aws-rds';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { Construct } from 'constructs';
import { PIPELINE } from '../lambdas/runtime/settings.ts';
import { designFinding } from './nag.ts';

export const DATABASE_PORT = 5432;
export const DATABASE_NAME = 'charges';
export const DATABASE_USER = 'charges';
/** The application role of the database the construct creates (lambdas/runtime/migrations.ts APPLICATION_ROLE). */
export const APPLICATION_USER = PIPELINE.applicationRole;
/** Room for the role's `_app` suffix in PostgreSQL's 63-character names. */
export const DATABASE_NAME_MAX_LENGTH = 59;

/**
 * A pipeline's application role: one per database, `<databaseName>_app` (`charges_app` for the
 * database the construct creates). Roles are server-wide: two pipelines on one server (the second
 * through existingDatabase) must never share one, or each deploy would set its own password on the
 * other's login, and the role would reach both databases. The migrate function hands it what the
 * migration files grant to charges_app (lambdas/runtime/migrations.ts).
 */
export function applicationRoleFor(databaseName: string): string {
  return `${databaseName}_app`;
}
/** The engine: the major version only, so RDS picks (and auto-upgrades) the current minor. */
export const DATABASE_ENGINE_VERSION = rds.PostgresEngineVersion.VER_18;

/** The id aws-cdk-lib gives its LogRetention singleton function (logs.LogRetention). */
const LOG_RETENTION_SINGLETON_ID = 'LogRetentionaae0aa3c5b4d4f87b02d85b201efdd8a';

export interface DatabaseProps {
  readonly vpc: ec2.IVpc;
  /** The only security group allowed to connect (port 5432). */
  readonly clientSecurityGroup: ec2.ISecurityGroup;
  readonly instanceType: ec2.InstanceType;
  readonly multiAz: boolean;
  readonly allocatedStorageGiB: number;
  readonly maxAllocatedStorageGiB: number;
  readonly backupRetention: cdk.Duration;
  readonly deletionProtection: boolean;
  readonly removalPolicy: cdk.RemovalPolicy;
  readonly logRetention: logs.RetentionDays;
  /** The instance's subnets. @default PRIVATE_ISOLATED */
  readonly subnets?: ec2.SubnetSelection;
  /** Owner credentials to use (JSON with username and password). @default - generated */
  readonly ownerSecret?: secretsmanager.ISecret;
  /** Both secrets are rotated this often. */
  readonly rotationInterval: cdk.Duration;
  /** Where the rotation functions run (they need Secrets Manager and the database). */
  readonly rotationSubnets?: ec2.SubnetSelection;
}

/** One login's secret and what the migrations must wait for / run before (Database.addLogin). */
export interface DatabaseLogin {
  readonly secret: secretsmanager.ISecret;
  /** The secret's attachment to the instance: in place before the migrate function reads it. */
  readonly ready: Construct[];
  /** Its rotation and schedule: created only after the migrations gave the role its password. */
  readonly rotations: Construct[];
}

export class Database extends Construct {
  readonly instance: rds.DatabaseInstance;
  /** The owner's credentials, JSON: host, port, username, password, dbname, engine. Migrate only. */
  readonly secret: secretsmanager.ISecret;
  /** The application role's credentials (same shape), used by charge, reconcile and ops. */
  readonly applicationSecret: secretsmanager.ISecret;
  /**
   * The rotation of each secret and its schedule (a child of the secret's attachment): created only
   * after the migrations ran, since the role needs its password before anything rotates it.
   */
  readonly rotations: Construct[];
  /**
   * What a first migration needs in place: the instance and the ingress rule on its security group.
   * Not the whole construct: the rotations in it wait for the migrations.
   */
  readonly readyForClients: Construct[];
  readonly securityGroup: ec2.SecurityGroup;
  readonly parameterGroup: rds.ParameterGroup;
  private readonly rotationSettings: {
    readonly vpc: ec2.IVpc;
    readonly vpcSubnets: ec2.SubnetSelection;
    readonly interval: cdk.Duration;
    readonly removalPolicy: cdk.RemovalPolicy;
  };

  constructor(scope: Construct, id: string, props: DatabaseProps) {
    super(scope, id);
    const engine = rds.DatabaseInstanceEngine.postgres({ version: DATABASE_ENGINE_VERSION });

    this.securityGroup = new ec2.SecurityGroup(this, 'SecurityGroup', {
      vpc: props.vpc,
      description: 'Charge pipeline database: PostgreSQL from the pipeline functions only',
      allowAllOutbound: false,
    });
    this.securityGroup.addIngressRule(
      props.clientSecurityGroup,
      ec2.Port.tcp(DATABASE_PORT),
      'PostgreSQL from the pipeline functions',
    );
    // The rule just added (the rotations add theirs later, and those wait for the migrations).
    const functionsIngress = this.securityGroup.node.children.filter((child) => child instanceof ec2.CfnSecurityGroupIngress);
    props.clientSecurityGroup.addEgressRule(
      this.securityGroup,
      ec2.Port.tcp(DATABASE_PORT),
      'PostgreSQL to the charge pipeline database',
    );

    this.parameterGroup = new rds.ParameterGroup(this, 'Parameters', {
      engine,
      description: 'Charge pipeline: TLS required for every connection',
      parameters: { 'rds.force_ssl': '1' },
    });

    // The instance's own generated secret has no dbname; the functions read it from the secret.
    const retainSecrets =
      props.removalPolicy === cdk.RemovalPolicy.DESTROY ? cdk.RemovalPolicy.DESTROY : cdk.RemovalPolicy.RETAIN;
    let credentials: secretsmanager.ISecret;
    if (props.ownerSecret) {
      credentials = props.ownerSecret;
    } else {
      const generated = new rds.DatabaseSecret(this, 'Credentials', { username: DATABASE_USER, dbname: DATABASE_NAME });
      // A snapshot outliving the stack is of little use without the password that opens it.
      generated.applyRemovalPolicy(retainSecrets);
      credentials = generated;
    }

    this.instance = new rds.DatabaseInstance(this, 'Instance', {
      engine,
      instanceType: props.instanceType,
      vpc: props.vpc,
      vpcSubnets: props.subnets ?? { subnetType: ec2.SubnetType.PRIVATE_ISOLATED },
      securityGroups: [this.securityGroup],
      port: DATABASE_PORT,
      databaseName: DATABASE_NAME,
      credentials: rds.Credentials.fromSecret(credentials),
      parameterGroup: this.parameterGroup,
      caCertificate: rds.CaCertificate.RDS_CA_RSA2048_G1,
      multiAz: props.multiAz,
      storageType: rds.StorageType.GP3,
      allocatedStorage: props.allocatedStorageGiB,
      maxAllocatedStorage: props.maxAllocatedStorageGiB,
      storageEncrypted: true,
      publiclyAccessible: false,
      autoMinorVersionUpgrade: true,
      backupRetention: props.backupRetention,
      deleteAutomatedBackups: false,
      copyTagsToSnapshot: true,
      deletionProtection: props.deletionProtection,
      removalPolicy: props.removalPolicy,
      cloudwatchLogsExports: ['postgresql'],
      cloudwatchLogsRetention: props.logRetention,
    });
    this.secret = this.instance.secret ?? credentials;
    this.readyForClients = [this.instance.node.defaultChild as Construct, ...functionsIngress];
    // (the secrets' attachments too, but not the constructs: the rotation schedules are their children)

    const ownerAttachment = this.secret.node.defaultChild;
    if (ownerAttachment) this.readyForClients.push(ownerAttachment as Construct);
    // Single-user rotation of every login: a rotation changes the password in the database, then in
    // the secret; a function whose new connection is refused in between re-reads the secret once
    // (lambdas/runtime/database.ts), and open connections are not affected.
    this.rotationSettings = {
      vpc: props.vpc,
      vpcSubnets: props.rotationSubnets ?? { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
      interval: props.rotationInterval,
      removalPolicy: retainSecrets,
    };
    this.rotations = [this.instance.addRotationSingleUser({ automaticallyAfter: props.rotationInterval, vpcSubnets: this.rotationSettings.vpcSubnets })];
    const schedule = this.secret.node.tryFindChild('RotationSchedule');
    if (schedule) this.rotations.push(schedule as Construct);

    // The application role's login: the migrate function sets this password on the role (as a SCRAM
    // verifier) and the functions connect with it.
    const application = this.addLogin('Application', APPLICATION_USER);
    this.applicationSecret = application.secret;
    this.readyForClients.push(...application.ready);
    this.rotations.push(...application.rotations);

    designFinding(this.instance, {
      id: 'AwsSolutions-RDS11',
      reason:
        'A non-default port hides nothing from a scanner inside the VPC, and only the functions security group may reach the instance at all.',
    });
    // A single-AZ instance (AwsSolutions-RDS3) and deletion protection off (AwsSolutions-RDS10) are
    // choices of the environment: the app that makes them acknowledges them (bin/app.ts, dev profile).
    // cloudwatchLogsRetention is applied by CDK's LogRetention function, a stack-level singleton.
    const logRetention = cdk.Stack.of(this).node.tryFindChild(LOG_RETENTION_SINGLETON_ID);
    if (logRetention) {
      designFinding(logRetention, 
        {
          id: 'AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]',
          reason:
            "CDK's own log-retention function only needs the AWS managed basic execution policy to write its logs.",
        },
        {
          id: 'AwsSolutions-IAM5[Resource::*]',
          reason:
            "CDK's own log-retention function sets the retention of the database's log group, whose name RDS decides when it starts exporting.",
        },
      );
    }
  }

  /**
   * A login of its own on this instance for `username` (the application role; an outcome consumer's
   * role): a generated secret attached to the instance (host, port, engine, dbname), rotated like
   * the owner's. The migrate function creates the role if needed and sets this password on it, so
   * `ready` must exist before the migrations run and `rotations` may start only after them.
   */
  addLogin(id: string, username: string): DatabaseLogin {
    const generated = new rds.DatabaseSecret(this, `${id}Credentials`, { username, dbname: DATABASE_NAME });
    generated.applyRemovalPolicy(this.rotationSettings.removalPolicy);
    const secret = generated.attach(this.instance);
    const rotation = new secretsmanager.SecretRotation(this, `${id}Rotation`, {
      application: secretsmanager.SecretRotationApplication.POSTGRES_ROTATION_SINGLE_USER,
      secret,
      target: this.instance,
      vpc: this.rotationSettings.vpc,
      vpcSubnets: this.rotationSettings.vpcSubnets,
      automaticallyAfter: this.rotationSettings.interval,
    });
    const attachment = secret.node.defaultChild;
    const schedule = secret.node.tryFindChild('RotationSchedule');
    return {
      secret,
      ready: attachment ? [attachment as Construct] : [],
      rotations: [rotation, ...(schedule ? [schedule as Construct] : [])],
    };
  }
}
