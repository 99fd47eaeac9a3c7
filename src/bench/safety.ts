/**
 * Safe by default: a benchmark calls tools thousands of times with generated arguments, so a tool
 * that says (through its MCP annotations) that it may write is left alone unless the user allows
 * writes. Tools without annotations are called as before: nothing says they write.
 */

/** A tool left out because its annotations say it may change or delete data. */
export interface SkippedTool {
  tool: string;
  /** Which annotation, e.g. `destructiveHint: true`. */
  reason: string;
  /** The tool's `readOnlyHint` and `destructiveHint`, as it declared them. */
  annotations: { readOnlyHint?: unknown; destructiveHint?: unknown };
}

/**
 * Why calling `tool` with generated arguments may change the server's data, from its
 * annotations; undefined when nothing says so (read-only, or no annotations).
 * - `destructiveHint: true`: it may delete or overwrite (whatever `readOnlyHint` says);
 * - `readOnlyHint: false` without `destructiveHint`: it writes, destructively by the MCP default;
 * - `readOnlyHint: false` with `destructiveHint: false`: it writes, only adding (a new directory
 *   or file still changes the user's data, so it is left out too).
 */
export function writeRisk(tool: { annotations?: Record<string, unknown> }): string | undefined {
  const a = tool.annotations;
  if (!a) return undefined;
  if (a.destructiveHint === true) return 'destructiveHint: true';
  if (a.readOnlyHint === false) {
    if (a.destructiveHint === false) return 'readOnlyHint: false, destructiveHint: false (it only adds)';
    return 'readOnlyHint: false, no destructiveHint (destructive by default)';
  }
  return undefined;
}

/** The tools that may write, with why (in the order given). */
export function writingTools(tools: readonly { name: string; annotations?: Record<string, unknown> }[]): SkippedTool[] {
  const out: SkippedTool[] = [];
  for (const t of tools) {
    const reason = writeRisk(t);
    if (reason !== undefined)
      out.push({ tool: t.name, reason, annotations: { readOnlyHint: t.annotations?.readOnlyHint, destructiveHint: t.annotations?.destructiveHint } });
  }
  return out;
}
