// cfn-lint (Python, `pip install cfn-lint`; installed on every machine of this workplace) over a
// synthesized template. Tests that use it are `it.skipIf(!CFN_LINT_VERSION)`: without cfn-lint the
// check is reported as skipped, never as passed.
import { execFileSync } from 'node:child_process';

/** cfn-lint's version, or null when it is not installed. */
export const CFN_LINT_VERSION: string | null = (() => {
  try {
    return execFileSync('cfn-lint', ['--version'], { encoding: 'utf8' }).trim();
  } catch {
    return null;
  }
})();

/** The error-level findings of cfn-lint on a template file, as `Rule: message` lines. */
export function cfnLintErrors(templateFile: string): string[] {
  let output: string;
  try {
    output = execFileSync('cfn-lint', ['--format', 'json', templateFile], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  } catch (error) {
    output = (error as { stdout: string }).stdout; // exit code bits: 2 = error, 4 = warning, 8 = informational; JSON on stdout either way
  }
  const matches = JSON.parse(output) as { Level: string; Rule: { Id: string }; Message: string }[];
  return matches.filter((m) => m.Level === 'Error').map((m) => `${m.Rule.Id}: ${m.Message}`);
}
