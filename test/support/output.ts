// What a handler writes while `work` runs — Powertools logs and EMF metrics go to process.stdout —
// captured (stdout and stderr) and not shown, for the tests that read or scan it.
export async function captureOutput<T>(work: () => Promise<T>): Promise<{ result: T; output: string; lines: string[] }> {
  const chunks: string[] = [];
  const out = process.stdout.write.bind(process.stdout);
  const err = process.stderr.write.bind(process.stderr);
  const grab = ((chunk: unknown) => {
    chunks.push(typeof chunk === 'string' ? chunk : Buffer.from(chunk as Uint8Array).toString('utf8'));
    return true;
  }) as typeof process.stdout.write;
  process.stdout.write = grab;
  process.stderr.write = grab;
  try {
    const result = await work();
    const output = chunks.join('');
    return { result, output, lines: output.split('\n').filter((l) => l.trim() !== '') };
  } finally {
    process.stdout.write = out;
    process.stderr.write = err;
  }
}
