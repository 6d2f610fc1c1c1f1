// cfn-lint (Python, `pip install cfn-lint`; installed on every machine of this workplace) over a
// synthesized template. Without cfn-lint a test that uses it is reported as skipped, never as passed
// (the package test fails instead under CI=true).
import { execFileSync } from 'node:child_process';

/** cfn-lint's version, or null when it is not installed. */
export const CFN_LINT_VERSION: string | null = (() => {
  try {
    return execFileSync('cfn-lint', ['--version'], { encoding: 'utf8' }).trim();
  } catch {
    return null;
  }
})();

/** The error-level findings of cfn-lint on template files (one run), as `Rule: message` lines. */
export function cfnLintErrors(templateFile: string | readonly string[]): string[] {
  let output: string;
  const files = typeof templateFile === 'string' ? [templateFile] : [...templateFile];
  try {
    output = execFileSync('cfn-lint', ['--format', 'json', ...files], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  } catch (error) {
    output = (error as { stdout: string }).stdout; // exit code bits: 2 = error, 4 = warning, 8 = informational; JSON on stdout either way
  }
  const matches = JSON.parse(output) as { Level: string; Rule: { Id: string }; Message: string }[];
  return matches.filter((m) => m.Level === 'Error').map((m) => `${m.Rule.Id}: ${m.Message}${files.length > 1 ? ` (${(m as { Filename?: string }).Filename ?? ''})` : ''}`);
}
