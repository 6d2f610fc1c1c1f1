// A small reader for the repository's Markdown, enough for the documentation tests: the prose lines
// outside fenced code blocks, the headings with their GitHub anchors, and the relative links.
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';

export const PROJECT_ROOT = path.resolve(import.meta.dirname, '../..');
export const DOCS_DIR = path.join(PROJECT_ROOT, 'docs');

/** README.md and every page under docs/, as absolute paths. */
export function documentationFiles(): string[] {
  const pages = readdirSync(DOCS_DIR).filter((name) => name.endsWith('.md')).sort();
  return [path.join(PROJECT_ROOT, 'README.md'), ...pages.map((name) => path.join(DOCS_DIR, name))];
}

export function readDoc(file: string): string {
  return readFileSync(file, 'utf8');
}

/** Lines outside ``` / ~~~ fences, with their 1-based numbers; inline code spans blanked out. */
export function proseLines(text: string): { line: number; text: string }[] {
  const out: { line: number; text: string }[] = [];
  let fence: string | null = null;
  text.split('\n').forEach((raw, i) => {
    const marker = /^\s*(`{3,}|~{3,})/.exec(raw)?.[1];
    if (marker) {
      if (fence === null) fence = marker[0]!;
      else if (marker[0] === fence) fence = null;
      return;
    }
    if (fence === null) out.push({ line: i + 1, text: raw });
  });
  return out;
}

/**
 * GitHub's heading anchor: the rendered text lowercased, every character that is not a letter, a
 * digit, a space, `-` or `_` dropped, each space turned into `-`. Inline code keeps its text, link
 * syntax keeps its label, emphasis markers go.
 */
export function githubSlug(heading: string): string {
  const rendered = heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/`/g, '')
    .replace(/\*/g, '')
    .trim()
    .toLowerCase();
  return rendered.replace(/[^\p{L}\p{N}\s_-]/gu, '').replace(/\s/g, '-');
}

/** Every anchor a file's headings produce, with GitHub's -1, -2 … suffixes for repeats. */
export function anchors(text: string): Set<string> {
  const seen = new Map<string, number>();
  const result = new Set<string>();
  for (const { text: line } of proseLines(text)) {
    const heading = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line)?.[1];
    if (heading === undefined) continue;
    const slug = githubSlug(heading);
    const count = seen.get(slug) ?? 0;
    seen.set(slug, count + 1);
    result.add(count === 0 ? slug : `${slug}-${count}`);
  }
  return result;
}

export interface Link {
  line: number;
  target: string;
}

/** Inline links and images `[label](target)` outside code, external ones (scheme:, //) left out. */
export function relativeLinks(text: string): Link[] {
  const links: Link[] = [];
  for (const { line, text: raw } of proseLines(text)) {
    const prose = raw.replace(/`[^`]*`/g, (code) => ' '.repeat(code.length));
    for (const match of prose.matchAll(/!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) {
      const target = match[1]!;
      if (/^[a-z][a-z0-9+.-]*:/i.test(target) || target.startsWith('//')) continue;
      links.push({ line, target });
    }
  }
  return links;
}
