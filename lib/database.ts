// The database: RDS PostgreSQL 18 in isolated subnets, storage encrypted, TLS required by the server
// (rds.force_ssl) and verified by the clients, credentials generated into Secrets Manager.
import * as cdk from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import type * as logs from 'aws-cdk-lib/aws-logs';
import * as rds from 'aws-cdk-lib/aws-rds';
import type * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { Construct } from 'constructs';

export const DATABASE_PORT = 5432;
export const DATABASE_NAME = 'charges';
export const DATABASE_USER = 'charges';

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
}

export class Database extends Construct {
  readonly instance: rds.DatabaseInstance;
  /** JSON: host, port, username, password, dbname, engine, dbInstanceIdentifier. */
  readonly secret: secretsmanager.ISecret;
  readonly securityGroup: ec2.SecurityGroup;
  readonly parameterGroup: rds.ParameterGroup;

  constructor(scope: Construct, id: string, props: DatabaseProps) {
    super(scope, id);
    const engine = rds.DatabaseInstanceEngine.postgres({ version: rds.PostgresEngineVersion.VER_18_3 });

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
    const credentials = new rds.DatabaseSecret(this, 'Credentials', {
      username: DATABASE_USER,
      dbname: DATABASE_NAME,
    });
    // A snapshot outliving the stack is of little use without the password that opens it.
    credentials.applyRemovalPolicy(
      props.removalPolicy === cdk.RemovalPolicy.DESTROY ? cdk.RemovalPolicy.DESTROY : cdk.RemovalPolicy.RETAIN,
    );

    this.instance = new rds.DatabaseInstance(this, 'Instance', {
      engine,
      instanceType: props.instanceType,
      vpc: props.vpc,
      vpcSubnets: { subnetType: ec2.SubnetType.PRIVATE_ISOLATED },
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

    cdk.Validations.of(credentials).acknowledge({
      id: 'AwsSolutions-SMG4',
      reason:
        'Rotation is left off because the functions keep pooled connections per container and read the password at cold start, so a rotation would fail new connections until containers recycle.',
    });
    cdk.Validations.of(this.instance).acknowledge({
      id: 'AwsSolutions-RDS11',
      reason:
        'A non-default port hides nothing from a scanner inside the VPC, and only the functions security group may reach the instance at all.',
    });
    if (!props.multiAz) {
      cdk.Validations.of(this.instance).acknowledge({
        id: 'AwsSolutions-RDS3',
        reason:
          'This environment chose a single-AZ instance to halve its cost, accepting downtime and restore-from-backup when its AZ fails (set multiAz for production).',
      });
    }
    if (!props.deletionProtection) {
      cdk.Validations.of(this.instance).acknowledge({
        id: 'AwsSolutions-RDS10',
        reason:
          'This environment turned deletion protection off so that cdk destroy works, and its removal policy still decides whether a final snapshot is kept.',
      });
    }
    // cloudwatchLogsRetention is applied by CDK's LogRetention function, a stack-level singleton.
    const logRetention = cdk.Stack.of(this).node.tryFindChild(LOG_RETENTION_SINGLETON_ID);
    if (logRetention) {
      cdk.Validations.of(logRetention).acknowledge(
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
}
