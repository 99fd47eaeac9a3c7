/**
 * BFCL's grader process (src/env/bfcl/grader.ts) dying costs only the requests in flight: they fail
 * with the cause, and the next request starts a new process, which grades as before.
 */
import type { ChildProcess } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { BfclGrader, bfclEntries } from '../../src/env/index.ts';

describe("BFCL's grader", () => {
  it('a killed grader fails the request in flight, naming it; the next request restarts it and grades as before', async () => {
    const g = new BfclGrader();
    const e = bfclEntries('simple_python')[0]!;
    const right = e.expert[0]!.map((c) => ({ [c.name]: JSON.stringify(c.arguments) }));
    expect((await g.grade('simple_python', e.id, right)).valid).toBe(true);
    const child = (g as unknown as { child: ChildProcess }).child;
    const inFlight = g.grade('simple_python', e.id, right);
    child.kill('SIGKILL');
    await expect(inFlight).rejects.toThrow(/BFCL's grader exited/);
    const again = await g.grade('simple_python', e.id, right);
    expect(again.valid).toBe(true);
    const wrong = await g.grade('simple_python', e.id, [{ not_a_function: '{}' }]);
    expect(wrong.valid).toBe(false);
    g.close();
  }, 60_000);
});
