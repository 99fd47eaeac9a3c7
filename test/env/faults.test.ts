/**
 * Fault injection (src/env/faults.ts) against the real bundled servers: the spec's parser, the
 * determinism of the draws, each fault marked in trajectories, setup calls and state checks left
 * alone, the step rewards of sabotaged calls, distractor tools in the agent's list.
 */
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ExpertPolicy, RandomPolicy } from '../../src/agents/index.ts';
import {
  Environment,
  EpisodeFaults,
  formatFaults,
  parseFaults,
  rollout,
  TrajectorySchema,
  type FaultOptions,
  type Observation,
  type Policy,
  type PolicyAction,
  type Trajectory,
} from '../../src/env/index.ts';
import { generateSuite } from '../../src/env/suites/index.ts';
import { resolveConfig, RUN_IDENTITY } from '../../src/trainers/index.ts';
import { runCli, kvCounterTask } from '../helpers.ts';

const calcTasks = generateSuite('calculator')
  .filter((t) => t.split === 'eval')
  .slice(0, 6);
const calcTask = calcTasks[0]!; // "compute 98 - 4": one evaluate call, then the answer

const kvTask = kvCounterTask('kv-faults');

/** Calls `name` (a tool of the agent's list, chosen by `pick`) on turn 0 with `args`, then answers. */
class CallOnce implements Policy {
  readonly id = 'call-once';
  seen: Observation[] = [];
  constructor(
    private readonly pick: (o: Observation) => string,
    private readonly args: Record<string, unknown>,
    private readonly answer = '94',
  ) {}
  async act(o: Observation): Promise<PolicyAction> {
    this.seen.push(o);
    if (o.turn === 0) return { content: '', toolCalls: [{ name: this.pick(o), arguments: this.args }] };
    return { content: this.answer };
  }
}

const envs: Environment[] = [];
function env(faults?: FaultOptions, callTimeoutMs?: number): Environment {
  const e = new Environment({ ...(faults ? { faults } : {}), ...(callTimeoutMs ? { callTimeoutMs } : {}) });
  envs.push(e);
  return e;
}
afterAll(async () => {
  for (const e of envs) await e.close();
});

const steps = (t: Trajectory) => t.turns.flatMap((turn) => turn.tool_results);

describe('the --faults spec', () => {
  it('reads every fault, in any order, with defaults for those not named', () => {
    expect(parseFaults('timeout=0.05,error=0.05,malformed=0.02,slow=200ms@0.1,distractors=5')).toEqual({
      timeout: 0.05,
      error: 0.05,
      malformed: 0.02,
      slow: { ms: 200, p: 0.1 },
      distractors: 5,
    });
    expect(parseFaults(' distractors=2 , timeout=5% ')).toEqual({ timeout: 0.05, error: 0, malformed: 0, slow: null, distractors: 2 });
    expect(parseFaults('slow=1.5s@1')).toMatchObject({ slow: { ms: 1500, p: 1 } });
    expect(parseFaults('slow=30@0.5')).toMatchObject({ slow: { ms: 30, p: 0.5 } });
    expect(parseFaults('timeout=0.5,error=0.5')).toMatchObject({ timeout: 0.5, error: 0.5 });
    expect(formatFaults(parseFaults('distractors=5,slow=200ms@0.1,malformed=0.02,timeout=0.05'))).toBe(
      'timeout=0.05,malformed=0.02,slow=200ms@0.1,distractors=5',
    );
  });

  it('refuses bad specs with a message that says what is wrong', () => {
    const bad: [string, string][] = [
      ['x=1', "--faults: unknown fault 'x'; the faults are timeout, error, malformed, slow, distractors"],
      ['timeout=1.5', '--faults: timeout: 1.5 is not a probability: it must be in [0, 1]'],
      ['error=-0.1', '--faults: error: -0.1 is not a probability: it must be in [0, 1]'],
      ['malformed=lots', "--faults: malformed: 'lots' is not a probability (a number from 0 to 1, e.g. malformed=0.05)"],
      ['timeout', "--faults: 'timeout' needs a value: timeout=<probability>, e.g. timeout=0.05"],
      ['slow=200ms', "--faults: slow: '200ms' is not <duration>@<probability> (slow=<duration>@<probability>, e.g. slow=200ms@0.1)"],
      ['slow=fast@0.1', "--faults: slow: 'fast' is not a duration (e.g. 200ms or 1.5s)"],
      ['slow=200ms@2', '--faults: slow: 2 is not a probability: it must be in [0, 1]'],
      ['distractors=2.5', "--faults: distractors: '2.5' is not a count of tools from 0 to 50"],
      ['distractors=51', "--faults: distractors: '51' is not a count of tools from 0 to 50"],
      ['timeout=0.1,timeout=0.2', "--faults: 'timeout' is given twice"],
      [
        'timeout=0.6,error=0.3,malformed=0.2',
        '--faults: timeout + error + malformed add up to 1.1: a call fails in at most one way, so their sum must be at most 1',
      ],
      ['', '--faults: no faults given; e.g. --faults timeout=0.05,error=0.05,malformed=0.02,slow=200ms@0.1,distractors=5'],
      ['timeout=0.1,,error=0.1', "--faults: an empty item in 'timeout=0.1,,error=0.1' (items are name=value, separated by commas)"],
    ];
    for (const [spec, message] of bad) expect(() => parseFaults(spec), spec).toThrow(message);
  });
});

describe('fault injection', () => {
  it('is deterministic: the same seed and episode give the same faults, another seed others', async () => {
    const spec = 'timeout=0.2,error=0.2,malformed=0.2,distractors=2';
    const marks = async (seed: number) => {
      const r = await rollout(env({ spec, seed }), new RandomPolicy(3, 0.1), calcTasks, { group: 3, concurrency: 6 });
      return r.trajectories
        .sort((a, b) => `${a.group_id}#${a.sample}`.localeCompare(`${b.group_id}#${b.sample}`))
        .map(
          (t) =>
            `${t.group_id}#${t.sample}: ${steps(t)
              .map((s) => `${s.name}:${s.fault ?? '-'}:${s.fault === 'malformed' ? s.text : ''}`)
              .join(' ')} | ${(t.tools ?? []).map((x) => x.name).join(',')}`,
        );
    };
    const a = await marks(1);
    expect(await marks(1)).toEqual(a);
    expect(await marks(2)).not.toEqual(a);
    expect(a.join('\n')).toMatch(/:(timeout|error|malformed):/);

    // The draws themselves: a function of the seed, the episode key and the call's index.
    const tools = [{ name: 'evaluate', description: 'Evaluate', inputSchema: { type: 'object' }, server: 'calculator', tool: 'evaluate' }];
    const draw = async (seed: number, key: string) => {
      const f = new EpisodeFaults({ spec: 'timeout=0.3,error=0.3', seed }, key);
      f.withDistractors(tools);
      const out: string[] = [];
      for (let i = 0; i < 40; i++)
        out.push(
          (await f.call(tools[0]!, {}, async () => ({ content: [{ type: 'text', text: '1' }], isError: false, ms: 0 }), { timeoutMs: 1000 })).fault ?? '-',
        );
      return out.join(',');
    };
    expect(await draw(5, 'g#0')).toBe(await draw(5, 'g#0'));
    expect(await draw(5, 'g#1')).not.toBe(await draw(5, 'g#0'));
    expect(await draw(6, 'g#0')).not.toBe(await draw(5, 'g#0'));
  });

  it('an injected timeout fails the call at once as a timeout would, marked, and the server never sees it', async () => {
    const t = await env({ spec: 'timeout=1' }, 5000).runEpisode(calcTask, new ExpertPolicy());
    expect(TrajectorySchema.parse(t)).toBeTruthy();
    const [s] = steps(t);
    expect(s).toMatchObject({
      name: 'evaluate',
      isError: true,
      errorKind: 'timeout',
      fault: 'timeout',
      text: "The call to tool 'evaluate' timed out after 5000 ms",
    });
    expect(s!.ms).toBeLessThan(1000);
    expect(t.metrics).toMatchObject({ tool_calls: 1, tool_errors: 1, injected_faults: 1 });
    expect(t.finish).toBe('answer'); // an injected fault never ends the episode
  });

  it('an injected error is an isError result with a plausible text', async () => {
    const t = await env({ spec: 'error=1' }).runEpisode(calcTask, new ExpertPolicy());
    const [s] = steps(t);
    expect(s).toMatchObject({ isError: true, errorKind: 'tool', fault: 'error' });
    expect(s!.text).toMatch(/error|unavailable|rate limit|reset|locked/i);
    expect(t.messages.find((m) => m.role === 'tool')).toMatchObject({ is_error: true, content: s!.text });
  });

  it('a malformed result is not what the tool returns: garbled or truncated text, or structured content against the output schema', async () => {
    const e = env({ spec: 'malformed=1' });
    const clean = steps(await env().runEpisode(calcTask, new ExpertPolicy()))[0]!;
    expect(clean).toMatchObject({ text: '94', structured: { value: '94', is_integer: true } });
    const seen = new Set<string>();
    for (let sample = 0; sample < 12; sample++) {
      const s = steps(await e.runEpisode(calcTask, new ExpertPolicy(), { groupId: 'm', sample }))[0]!;
      expect(s).toMatchObject({ fault: 'malformed', isError: false });
      expect(s.text).not.toBe(clean.text);
      if (s.structured !== undefined) {
        // The output schema: value a string, is_integer a boolean, all six fields required.
        const st = s.structured as Record<string, unknown>;
        expect(
          typeof st.value !== 'string' || typeof st.is_integer !== 'boolean' || Object.keys(st).length !== 6 || !('expression' in st && 'decimal' in st),
        ).toBe(true);
        seen.add('schema');
      } else seen.add('text');
    }
    expect([...seen].sort()).toEqual(['schema', 'text']);
  });

  it('slow=200ms@1 delays every call by 200 ms and marks it; the result is the true one', async () => {
    const t = await env({ spec: 'slow=200ms@1' }).runEpisode(calcTask, new ExpertPolicy());
    const [s] = steps(t);
    expect(s).toMatchObject({ fault: 'slow', isError: false, text: '94' });
    expect(s!.ms).toBeGreaterThanOrEqual(199);
    expect(t.timings.tool_ms).toBeGreaterThanOrEqual(199);
    expect(t.success).toBe(true);
    // A delay up to the call's limit is a timeout.
    const late = steps(await env({ spec: 'slow=300ms@1' }, 100).runEpisode(calcTask, new ExpertPolicy()))[0]!;
    expect(late).toMatchObject({ fault: 'timeout', errorKind: 'timeout', isError: true });
  });

  it("distractors: extra tools named after the real ones, in the agent's list, that do not help", async () => {
    const clean = await env().runEpisode(calcTask, new ExpertPolicy());
    const real = clean.tools!.map((x) => x.name);
    const e = env({ spec: 'distractors=5', seed: 4 });
    const p = new CallOnce((o) => o.tools.find((x) => !real.includes(x.name))!.name, { expression: '98 - 4' });
    const t = await e.runEpisode(calcTask, p);
    const names = t.tools!.map((x) => x.name);
    expect(names.slice(0, real.length)).toEqual(real);
    const extra = names.slice(real.length);
    expect(extra).toHaveLength(5);
    expect(new Set(names).size).toBe(names.length);
    for (const n of extra) expect(n).toMatch(new RegExp(`^(legacy_|experimental_|calculator_debug$)|(_v2|_batch|_cached)$`));
    expect(extra.some((n) => real.some((r) => n.includes(r)))).toBe(true);
    // The agent saw them (with the real tool's schema), and its call to one is marked and does not help.
    expect(p.seen[0]!.tools.map((x) => x.name)).toEqual(names);
    const schemas = new Set(clean.tools!.map((x) => JSON.stringify(x.parameters)));
    for (const d of p.seen[0]!.tools.slice(real.length)) {
      expect(schemas.has(JSON.stringify(d.inputSchema))).toBe(true);
      expect(d.description.length).toBeGreaterThan(10);
    }
    const [s] = steps(t);
    expect(s!.fault).toBe('distractor');
    expect(s!.text).not.toBe('94');
    expect(t.metrics.injected_faults).toBe(1);
    // The same distractors in every episode of this seed; another seed may choose others.
    const again = await e.runEpisode(calcTasks[1]!, new ExpertPolicy());
    expect(again.tools!.map((x) => x.name)).toEqual(names);
    expect(again.metrics.injected_faults).toBe(0);
  });

  it('setup calls and state checks see the true server', async () => {
    // Every agent call times out: the setup (set c=10) still ran, and the state check reads 10.
    const t = await env({ spec: 'timeout=1' }).runEpisode(kvTask, new ExpertPolicy());
    expect(t.task_error).toBeUndefined();
    expect(t.finish).toBe('answer');
    expect(steps(t)[0]).toMatchObject({ tool: 'incr', fault: 'timeout' });
    expect(t.checks[0]).toMatchObject({ kind: 'state', score: 0 });
    expect(t.checks[0]!.detail).toMatch(/"10"/);
    // Every agent call's result is malformed: the incr ran, and the state check reads the true 15.
    const m = await env({ spec: 'malformed=1' }).runEpisode(kvTask, new ExpertPolicy());
    expect(steps(m)[0]!.fault).toBe('malformed');
    expect(m.checks[0]).toMatchObject({ kind: 'state', score: 1 });
    expect(m.success).toBe(true);
    // Injected errors: the setup did not fail (the episode is no task error), the agent's call did.
    const e = await env({ spec: 'error=1' }).runEpisode(kvTask, new ExpertPolicy());
    expect(e.task_error).toBeUndefined();
    expect(steps(e)[0]!.fault).toBe('error');
    expect(e.checks[0]!.detail).toMatch(/"10"/);
  });

  it('a sabotaged call costs the agent nothing in its step rewards; a distractor call earns nothing', async () => {
    const clean = await env().runEpisode(calcTask, new ExpertPolicy());
    expect(clean.turns[0]!.step_reward).toBeCloseTo(0.3, 9);
    for (const spec of ['timeout=1', 'error=1', 'malformed=1']) {
      const t = await env({ spec }).runEpisode(calcTask, new ExpertPolicy());
      expect(steps(t)[0]!.fault, spec).toBe(spec.split('=')[0]);
      expect(t.turns[0]!.step_reward, spec).toBeCloseTo(clean.turns[0]!.step_reward, 9);
      expect(t.reward_parts.tools, spec).toBeCloseTo(clean.reward_parts.tools!, 9);
      expect(t.reward_parts.efficiency, spec).toBeCloseTo(clean.reward_parts.efficiency!, 9);
    }
    // RLVR: the sabotaged step still counts as a correct step.
    const rlvrClean = await new Environment({ reward: 'rlvr' }).runEpisode(calcTask, new ExpertPolicy());
    const rlvrFault = new Environment({ reward: 'rlvr', faults: { spec: 'timeout=1' } });
    envs.push(rlvrFault);
    const r = await rlvrFault.runEpisode(calcTask, new ExpertPolicy());
    expect(r.reward_parts.steps_fraction).toBe(1);
    expect(r.turns[0]!.step_reward).toBeCloseTo(rlvrClean.turns[0]!.step_reward, 9);
    // A distractor: the agent's choice, scored as a tool that does not help (never relevant nor useful).
    const e = env({ spec: 'distractors=6', seed: 1 });
    const real = new Set(clean.tools!.map((x) => x.name));
    for (const pick of [
      (o: Observation) => o.tools.find((x) => x.name.startsWith('legacy_'))?.name,
      (o: Observation) => o.tools.find((x) => x.name.endsWith('_v2'))?.name,
    ]) {
      const p = new CallOnce((o) => pick(o) ?? o.tools.find((x) => !real.has(x.name))!.name, { expression: '98 - 4' });
      const t = await e.runEpisode(calcTask, p);
      const s = steps(t)[0]!;
      expect(s.fault).toBe('distractor');
      expect(t.turns[0]!.step_reward).toBeCloseTo(s.isError ? 0 : 0.1, 9);
      expect(t.turns[0]!.step_reward).toBeLessThan(clean.turns[0]!.step_reward);
    }
  });

  it('marks every kind in one seeded run, and a run without faults has no marks', async () => {
    const spec = 'timeout=0.2,error=0.2,malformed=0.2,slow=20ms@0.3,distractors=3';
    const r = await rollout(env({ spec, seed: 0 }), new RandomPolicy(11, 0.05), calcTasks, { group: 4, concurrency: 8 });
    const kinds = new Set(r.trajectories.flatMap((t) => steps(t).map((s) => s.fault)).filter(Boolean));
    expect([...kinds].sort()).toEqual(['distractor', 'error', 'malformed', 'slow', 'timeout']);
    for (const t of r.trajectories) expect(t.metrics.injected_faults).toBe(steps(t).filter((s) => s.fault).length);
    const plain = await rollout(env(), new RandomPolicy(11, 0.05), calcTasks, { group: 2 });
    for (const t of plain.trajectories) {
      expect(t.metrics.injected_faults).toBeUndefined();
      expect(steps(t).some((s) => s.fault)).toBe(false);
    }
  });
});

describe('faults in training', () => {
  it('an environment with other faults shares the servers: training rollouts with faults, evaluations without', async () => {
    const base = env();
    const view = base.withFaults({ spec: 'timeout=1', seed: 2 });
    const [a, b] = await Promise.all([view.runEpisode(kvTask, new ExpertPolicy()), base.runEpisode(kvTask, new ExpertPolicy())]);
    expect(steps(a)[0]!.fault).toBe('timeout');
    expect(b.success).toBe(true);
    expect(steps(b)[0]!.fault).toBeUndefined();
    expect(b.metrics.injected_faults).toBeUndefined();
  });

  it("the training config takes faults (a flag of mcp-gym train), checks them, and they are part of the run's identity", () => {
    expect(resolveConfig({}).faults).toBe('');
    expect(resolveConfig({ faults: 'timeout=0.1,distractors=2' }).faults).toBe('timeout=0.1,distractors=2');
    expect(() => resolveConfig({ faults: 'x=1' })).toThrow("faults: unknown fault 'x'; the faults are timeout, error, malformed, slow, distractors");
    expect(() => resolveConfig({ faults: 'timeout=2' })).toThrow('faults: timeout: 2 is not a probability: it must be in [0, 1]');
    expect(RUN_IDENTITY).toContain('faults');
  });
});

describe('mcp-gym eval --faults (the built CLI)', () => {
  it('runs the same tasks and samples without and with the faults, and reports them side by side', async () => {
    const out = join(mkdtempSync(join(tmpdir(), 'mcp-gym-faults-')), 'eval');
    const r = await runCli([
      'eval',
      '--suite',
      'calculator',
      '--limit',
      '4',
      '-k',
      '2',
      '--policy',
      'expert',
      '--faults',
      'timeout=0.3,error=0.2,distractors=2',
      '--seed',
      '1',
      '--out',
      out,
    ]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/With and without faults \(the same tasks and samples; intervals 95% over tasks; seed 1\)/);
    expect(r.stdout).toMatch(/without faults +with --faults timeout=0.3,error=0.2,distractors=2/);
    expect(r.stdout).toMatch(/pass@1 +100\.0% \[\d+\.\d%, 100\.0%\] +\d+\.\d% \[/); // 4 tasks all solved: not [100, 100] (lib/evaluator.ts)
    expect(r.stdout).toMatch(/retention \(pass@1 with \/ without\) +0\.\d+/);
    expect(r.stdout).toMatch(/injected faults +- +(error|timeout) \d+/);
    const report = JSON.parse(readFileSync(join(out, 'eval.json'), 'utf8'));
    expect(report.pass_at_1.mean).toBe(1);
    expect(report.faults).toMatchObject({ faults: 'timeout=0.3,error=0.2,distractors=2', seed: 1, without: { pass_at_1: { mean: 1 } } });
    expect(report.faults.with.pass_at_1.mean).toBeLessThan(1);
    expect(report.faults.retention).toBeCloseTo(report.faults.with.pass_at_1.mean, 9);
    expect(JSON.parse(readFileSync(join(out, 'run.json'), 'utf8')).faults).toBe('timeout=0.3,error=0.2,distractors=2');
    const faulted = readFileSync(join(out, 'faults', 'trajectories.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Trajectory);
    expect(faulted).toHaveLength(8);
    expect(faulted.every((t) => t.tools!.length === 7)).toBe(true); // the calculator's 5 tools and 2 distractors
    // A bad spec is a usage error that says what is wrong.
    const bad = await runCli(['eval', '--suite', 'calculator', '--limit', '1', '--faults', 'timeout=0.2,x=1', '--out', `${out}-bad`]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("--faults: unknown fault 'x'; the faults are timeout, error, malformed, slow, distractors");
  });
});
