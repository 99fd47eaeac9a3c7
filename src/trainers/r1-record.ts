/** What the R1 pipeline's `pipeline.json` records: its stages, in order, and each finished stage's model and held-out success. */
export const R1_STAGES = ['1-sft', '2-grpo', '3-rs-sft', '4-grpo'] as const;
export type R1StageName = (typeof R1_STAGES)[number];

export interface HeldOut {
  success: number;
  /** 95% interval over the held-out tasks (cluster-robust: lib/evaluator.ts). */
  ci95: [number, number];
  episodes: number;
  tasks?: number;
  mean_reward: number;
}

export interface R1Stage {
  name: R1StageName;
  /** The model this stage ends with. */
  model: string;
  /** Held-out success of that model, on the pipeline's held-out tasks. */
  eval: HeldOut;
  /** Wall time, seconds (a resumed stage: every attempt's together). */
  seconds: number;
  detail: Record<string, unknown>;
}

export interface R1Record {
  format: 'mcp-gym-pipeline/1';
  pipeline: 'r1';
  config: Record<string, unknown>;
  held_out: { tasks: number; samples: number };
  stages: R1Stage[];
  /** Seconds spent in stages not finished yet (added to their wall time when they finish). */
  partial: Partial<Record<R1StageName, number>>;
}
