/**
 * Scripted policies: the expert replays a task's reference solution (its calls in order, one per
 * turn, then its answer; with `solution.turns`, each user turn's calls then its answer, the opening
 * message's turn first, then each follow-up's); the random policy calls random tools with random
 * arguments drawn from their schemas and answers something random. They bound what a learned
 * policy can do.
 */
import { seededRandom, type RandomFn } from '../../lib/index.ts';
import { sampleFromSchema } from '../tools/index.ts';
import type { Observation, Policy, PolicyAction, ProposedCall, TaskCall } from '../env/index.ts';

export class ExpertPolicy implements Policy {
  readonly id = 'expert';

  async act(obs: Observation): Promise<PolicyAction> {
    const solution = obs.task.solution;
    if (!solution) return { content: `I cannot solve task ${obs.task.id}: it has no reference solution.` };
    // In the toolbelt and search modes the meta-tools' calls are not the solution's: they are left out of the count.
    const metaNames = new Set(obs.tools.filter((t) => t.meta).map((t) => t.name));
    const madeSince = (from: number): number =>
      obs.messages.slice(from).filter((m) => m.role === 'assistant' && (m.tool_calls ?? []).some((c) => !metaNames.has(c.function.name))).length;
    let calls: readonly TaskCall[];
    let answer = solution.answer;
    let parallel = false;
    if (solution.turns) {
      // Per user turn: the calls made since the user's last message say where this turn is.
      const k = obs.userTurn ?? 0;
      const turn = solution.turns[Math.min(k, solution.turns.length - 1)];
      if (!turn) return { content: `I cannot solve user turn ${k} of task ${obs.task.id}: its reference solution has no turns.` };
      const made = madeSince(obs.messages.findLastIndex((m) => m.role === 'user') + 1);
      // A parallel turn: every call in one reply (as BFCL's parallel categories ask), then the answer.
      parallel = turn.parallel === true;
      calls = parallel ? (made > 0 ? [] : turn.calls) : turn.calls.slice(made);
      answer = turn.answer;
    } else calls = solution.calls.slice(metaNames.size ? madeSince(0) : obs.turn);
    if (calls.length === 0) return { content: answer };
    const meta = metaNames.size ? metaCalls(obs, calls) : undefined;
    if (meta) return { content: '', toolCalls: meta };
    const named = (c: TaskCall) => ({ name: obs.tools.find((t) => t.server === c.server && t.tool === c.tool)?.name ?? c.tool, arguments: c.arguments });
    return { content: '', toolCalls: (parallel ? calls : calls.slice(0, 1)).map(named) };
  }
}

/**
 * The meta-calls the expert makes before the solution's calls in the toolbelt and search modes
 * (src/env/tool-modes.ts), for the tools its remaining calls need that the agent cannot call yet:
 * toolbelt: `list_tools` for each of their servers not listed yet, then `add_tool` for each tool by
 * the name the list showed; search: `search_tools` with the server's and the tool's words. All in
 * one turn each. Undefined when every tool needed is callable.
 */
function metaCalls(obs: Observation, calls: readonly TaskCall[]): ProposedCall[] | undefined {
  const seen = new Set<string>();
  const missing = calls.filter((c) => {
    const key = `${c.server}/${c.tool}`;
    if (seen.has(key) || obs.tools.some((t) => !t.meta && t.server === c.server && t.tool === c.tool)) return false;
    seen.add(key);
    return true;
  });
  if (missing.length === 0) return undefined;
  if (obs.tools.some((t) => t.meta && t.name === 'search_tools'))
    return missing.map((c) => ({ name: 'search_tools', arguments: { query: `${c.server} ${c.tool.replace(/_/g, ' ')}` } }));
  const listed = obs.messages
    .filter((m) => m.role === 'tool' && m.name === 'list_tools')
    .map((m) => m.content)
    .join('\n');
  const headers = new Set(listed.split('\n').map((l) => /^(\S+) \(\d+ tools?\):$/.exec(l)?.[1]));
  const unlisted = [...new Set(missing.map((c) => c.server))].filter((s) => !headers.has(s));
  if (unlisted.length) return unlisted.map((server) => ({ name: 'list_tools', arguments: { server } }));
  return missing.map((c) => ({ name: 'add_tool', arguments: { name: listed.includes(`- ${c.server}_${c.tool}:`) ? `${c.server}_${c.tool}` : c.tool } }));
}

export class RandomPolicy implements Policy {
  readonly id = 'random';
  private readonly rng: RandomFn;

  constructor(
    seed = 7,
    private readonly answerProbability = 0.3,
  ) {
    this.rng = seededRandom(seed);
  }

  async act(obs: Observation): Promise<PolicyAction> {
    if (obs.tools.length === 0 || this.rng() < this.answerProbability) {
      const answers = [String(Math.floor(this.rng() * 1000)), 'done', 'I do not know', String(this.rng())];
      return { content: answers[Math.floor(this.rng() * answers.length)]! };
    }
    const tool = obs.tools[Math.floor(this.rng() * obs.tools.length)]!;
    return { content: '', toolCalls: [{ name: tool.name, arguments: sampleFromSchema(tool.inputSchema, this.rng) as Record<string, unknown> }] };
  }
}
