// The network: public subnets for the NAT gateway(s), private subnets with egress for the functions
// (Stripe is on the internet), isolated subnets for the database. Flow logs for the record.
import * as cdk from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as logs from 'aws-cdk-lib/aws-logs';
import { Construct } from 'constructs';

export interface NetworkProps {
  /** Use this VPC instead of creating one. It needs PRIVATE_WITH_EGRESS and PRIVATE_ISOLATED subnets in 2 AZs. */
  readonly vpc?: ec2.IVpc;
  /** NAT gateways of a new VPC (1 = cheapest, 2 = one per AZ, survives an AZ outage). */
  readonly natGateways: number;
  /** Use this group for the functions instead of creating one (it gets the egress rules below). */
  readonly functionsSecurityGroup?: ec2.ISecurityGroup;
  /** Where the functions may open HTTPS connections. @default anywhere (IPv4) */
  readonly httpsEgress?: readonly ec2.IPeer[];
  readonly logRetention: logs.RetentionDays;
  readonly removalPolicy: cdk.RemovalPolicy;
}

export class Network extends Construct {
  readonly vpc: ec2.IVpc;
  /** The functions' security group: HTTPS out (through NAT) and PostgreSQL to the database, nothing else. */
  readonly functionsSecurityGroup: ec2.ISecurityGroup;

  constructor(scope: Construct, id: string, props: NetworkProps) {
    super(scope, id);

    if (props.vpc) {
      this.vpc = props.vpc;
    } else {
      const vpc = new ec2.Vpc(this, 'Vpc', {
        maxAzs: 2,
        natGateways: props.natGateways,
        subnetConfiguration: [
          { name: 'public', subnetType: ec2.SubnetType.PUBLIC, cidrMask: 24 },
          { name: 'functions', subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS, cidrMask: 20 },
          { name: 'database', subnetType: ec2.SubnetType.PRIVATE_ISOLATED, cidrMask: 24 },
        ],
      });
      vpc.addFlowLog('FlowLog', {
        destination: ec2.FlowLogDestination.toCloudWatchLogs(
          new logs.LogGroup(this, 'FlowLogs', {
            retention: props.logRetention,
            removalPolicy:
              props.removalPolicy === cdk.RemovalPolicy.DESTROY ? cdk.RemovalPolicy.DESTROY : cdk.RemovalPolicy.RETAIN,
          }),
        ),
        trafficType: ec2.FlowLogTrafficType.ALL,
      });
      this.vpc = vpc;
    }

    this.functionsSecurityGroup =
      props.functionsSecurityGroup ??
      new ec2.SecurityGroup(this, 'FunctionsSecurityGroup', {
        vpc: this.vpc,
        description: 'Charge pipeline functions: HTTPS out, PostgreSQL to the database',
        allowAllOutbound: false,
      });
    // Stripe, Secrets Manager, EventBridge and STS are HTTPS endpoints reached through the NAT gateway
    // (or interface endpoints in the VPC). A security group cannot name a host and api.stripe.com has no
    // small fixed address set, so "anywhere" unless the platform narrows it (docs/deploy.md, "Egress").
    const peers = props.httpsEgress ?? [ec2.Peer.anyIpv4()];
    if (peers.length === 0) throw new Error('functionsHttpsEgress must name at least one peer: the functions cannot work without HTTPS (Stripe, Secrets Manager, EventBridge, STS)');
    for (const peer of peers) {
      this.functionsSecurityGroup.addEgressRule(peer, ec2.Port.tcp(443), props.httpsEgress ? 'HTTPS to Stripe and AWS APIs (functionsHttpsEgress)' : 'HTTPS to Stripe and AWS APIs through the NAT gateway');
    }
  }
}
