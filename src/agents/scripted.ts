/**
 * Scripted policies: the expert replays a task's reference solution (its calls in order, one per
 * turn, then its answer); the random policy calls random tools with random arguments drawn from
 * their schemas and answers something random. They bound what a learned policy can do.
 */
import { seededRandom, type RandomFn } from '../../lib/index.ts';
import { sampleFromSchema } from '../tools/index.ts';
import type { Observation, Policy, PolicyAction } from '../env/index.ts';

export class ExpertPolicy implements Policy {
  readonly id = 'expert';

  async act(obs: Observation): Promise<PolicyAction> {
    const solution = obs.task.solution;
    if (!solution) return { content: `I cannot solve task ${obs.task.id}: it has no reference solution.` };
    const call = solution.calls[obs.turn];
    if (!call) return { content: solution.answer };
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
