/** Shared by the BFCL tests: policies that plant failures into the expert's actions, and readers of a trajectory's BFCL verdict. */
import { spawn } from 'node:child_process';
import { ExpertPolicy } from '../../src/agents/index.ts';
import { bfclEnv, bfclPython, type CheckResult, type Observation, type Policy, type PolicyAction, type Trajectory } from '../../src/env/index.ts';

/** The expert (BFCL's possible answer or ground truth, replayed), its every action passed through `plant`. */
export class PlantedPolicy implements Policy {
  readonly id: string;
  private readonly expert = new ExpertPolicy();

  constructor(
    name: string,
    private readonly plant: (action: PolicyAction, obs: Observation) => PolicyAction = (a) => a,
  ) {
    this.id = `planted:${name}`;
  }

  async act(obs: Observation): Promise<PolicyAction> {
    return this.plant(await this.expert.act(obs), obs);
  }
}

/** How many assistant turns the agent took since the user's last message (the expert's position in a user turn). */
export function madeInUserTurn(obs: Observation): number {
  const lastUser = obs.messages.findLastIndex((m) => m.role === 'user');
  return obs.messages.slice(lastUser + 1).filter((m) => m.role === 'assistant').length;
}

/** The trajectory's `bfcl` check (every BFCL task has exactly one). */
export function bfclCheck(t: Trajectory): CheckResult {
  const checks = t.checks.filter((c) => c.kind === 'bfcl');
  if (checks.length !== 1) throw new Error(`${t.task_id}: ${checks.length} bfcl checks`);
  return checks[0]!;
}

/** BFCL's error type in a failed check's detail (`BFCL: value_error:others: ...` -> `value_error:others`), or undefined. */
export function bfclErrorType(c: CheckResult): string | undefined {
  return /^BFCL: ([a-z_]+:[a-z_]+):/.exec(c.detail)?.[1];
}

/** Runs BFCL's Python (`bfclPython()` with `bfclEnv()`) on `args`, with `input` on stdin; resolves with stdout, rejects naming stderr. */
export function runBfclPython(args: string[], input = ''): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(bfclPython(), args, { env: bfclEnv(), stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve(out) : reject(new Error(`${args.slice(0, 3).join(' ')} exited ${code}: ${err.slice(-2000)}`))));
    child.stdin.end(input);
  });
}
