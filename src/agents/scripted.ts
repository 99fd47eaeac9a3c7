/**
 * Scripted policies: the expert replays a task's reference solution (its calls in order, one per
 * turn, then its answer; with `solution.turns`, each user turn's calls then its answer, the opening
 * message's turn first, then each follow-up's); the random policy calls random tools with random
 * arguments drawn from their schemas and answers something random. They bound what a learned
 * policy can do.
 */
import { seededRandom, type RandomFn } from '../../lib/index.ts';
import { sampleFromSchema } from '../tools/index.ts';
import type { Observation, Policy, PolicyAction, TaskCall } from '../env/index.ts';

export class ExpertPolicy implements Policy {
  readonly id = 'expert';

  async act(obs: Observation): Promise<PolicyAction> {
    const solution = obs.task.solution;
    if (!solution) return { content: `I cannot solve task ${obs.task.id}: it has no reference solution.` };
    let call: TaskCall | undefined;
    let answer = solution.answer;
    if (solution.turns) {
      // Per user turn: the calls made since the user's last message say where this turn is.
      const k = obs.userTurn ?? 0;
      const turn = solution.turns[Math.min(k, solution.turns.length - 1)];
      if (!turn) return { content: `I cannot solve user turn ${k} of task ${obs.task.id}: its reference solution has no turns.` };
      const lastUser = obs.messages.findLastIndex((m) => m.role === 'user');
      const made = obs.messages.slice(lastUser + 1).filter((m) => m.role === 'assistant').length;
      // A parallel turn: every call in one reply (as BFCL's parallel categories ask), then the answer.
      if (turn.parallel) {
        if (made > 0 || turn.calls.length === 0) return { content: turn.answer };
        return {
          content: '',
          toolCalls: turn.calls.map((c) => ({
            name: obs.tools.find((t) => t.server === c.server && t.tool === c.tool)?.name ?? c.tool,
            arguments: c.arguments,
          })),
        };
      }
      call = turn.calls[made];
      answer = turn.answer;
    } else call = solution.calls[obs.turn];
    if (!call) return { content: answer };
    const tool = obs.tools.find((t) => t.server === call.server && t.tool === call.tool);
    return { content: '', toolCalls: [{ name: tool?.name ?? call.tool, arguments: call.arguments }] };
  }
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
