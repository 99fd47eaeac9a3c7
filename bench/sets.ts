/**
 * The benches' `--set field=value` options: training-config fields applied to every run of a bench.
 * Values: true/false, numbers, else strings.
 */
export function parseSets(sets: string[]): Record<string, unknown> {
  const extra: Record<string, unknown> = {};
  for (const kv of sets) {
    const i = kv.indexOf('=');
    if (i < 1) throw new Error(`--set ${kv}: expected field=value`);
    const v = kv.slice(i + 1);
    extra[kv.slice(0, i)] = v === 'true' ? true : v === 'false' ? false : Number.isFinite(Number(v)) ? Number(v) : v;
  }
  return extra;
}
