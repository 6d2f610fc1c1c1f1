// Every relative link in README.md and docs/ resolves: the file exists and, for a link into a
// Markdown file with an #anchor, a heading there produces that anchor (GitHub's slugs). A moved file
// or a renamed heading breaks this test, not a reader.
import { existsSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { anchors, documentationFiles, githubSlug, PROJECT_ROOT, readDoc, relativeLinks } from './markdown.ts';

describe('GitHub heading anchors', () => {
  it('are derived the way GitHub renders them', () => {
    expect(githubSlug('How to scale it')).toBe('how-to-scale-it');
    expect(githubSlug('The producer client (`lambdas/producer/client.ts`)')).toBe('the-producer-client-lambdasproducerclientts');
    expect(githubSlug('DeadLetterQueueNotEmpty — intake not recorded')).toBe('deadletterqueuenotempty--intake-not-recorded');
    expect(githubSlug('RDS Proxy: not by default')).toBe('rds-proxy-not-by-default');
    expect(githubSlug('The CLI: `npm run produce`')).toBe('the-cli-npm-run-produce');
    expect(githubSlug('**RECONCILE_MAX_RPS** and [the fake](fake-stripe.md)')).toBe('reconcile_max_rps-and-the-fake');
  });

  it('number repeated headings, and ignore headings inside code fences', () => {
    const text = '# A\n\n```sh\n# not a heading\n```\n\n## A\n';
    expect([...anchors(text)]).toEqual(['a', 'a-1']);
  });
});

describe('relative links in README.md and docs/', () => {
  const files = documentationFiles();

  it('finds the documentation and its links', () => {
    expect(files.map((f) => path.relative(PROJECT_ROOT, f))).toContain('docs/runbook.md');
    expect(files.flatMap((f) => relativeLinks(readDoc(f))).length).toBeGreaterThan(20);
  });

  it('ignores links written inside code', () => {
    expect(relativeLinks('see `[x](nowhere.md)`\n\n```\n[y](nowhere.md)\n```\n[z](somewhere.md)\n')).toEqual([
      { line: 6, target: 'somewhere.md' },
    ]);
  });

  for (const file of files) {
    const name = path.relative(PROJECT_ROOT, file);
    it(`${name}: every relative link resolves`, () => {
      const text = readDoc(file);
      const broken: string[] = [];
      for (const { line, target } of relativeLinks(text)) {
        const [rawPath, anchor] = target.split('#', 2) as [string, string | undefined];
        const linked = rawPath === '' ? file : path.resolve(path.dirname(file), decodeURIComponent(rawPath));
        if (!existsSync(linked)) {
          broken.push(`${name}:${line}: ${target} (no such file)`);
          continue;
        }
        if (anchor !== undefined && anchor !== '' && linked.endsWith('.md') && !anchors(readDoc(linked)).has(decodeURIComponent(anchor))) {
          broken.push(`${name}:${line}: ${target} (no heading with that anchor)`);
        }
      }
      expect(broken).toEqual([]);
    });
  }
});
