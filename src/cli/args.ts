/** Command-line argument helpers. */
export class UsageError extends Error {}

export function intFlag(value: string | undefined, flag: string, fallback: number): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new UsageError(`${flag} must be a non-negative integer, got '${value}'`);
  return n;
}
