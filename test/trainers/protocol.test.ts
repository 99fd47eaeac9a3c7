/**
 * One contract: the learner's JSON Schema and PROTOCOL.md's tables are generated from the zod
 * schemas of src/trainers/protocol.ts and must be current; every field of the training config is
 * a command-line flag with its description as help; the TypeScript side refuses arguments and
 * answers that break the contract, naming the field.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { TRAIN_FLAGS, TRAIN_HELP } from '../../src/cli/train.ts';
import { flagValues } from '../../src/cli/flags.ts';
import { LearnerConfigSchema, LEARNER_COMMANDS, protocolJsonText, TrainConfigSchema } from '../../src/trainers/index.ts';
import { PROTOCOL_DOC_FILE, PROTOCOL_SCHEMA_FILE, renderProtocolDoc } from '../../src/trainers/protocol-docs.ts';

const REGENERATE = 'run: npx tsx scripts/gen-protocol.ts';

describe('the learner contract', () => {
  it('the committed JSON Schema is the one the zod contract emits', () => {
    expect(readFileSync(PROTOCOL_SCHEMA_FILE, 'utf8'), REGENERATE).toBe(protocolJsonText());
  });

  it('the tables of PROTOCOL.md are the ones rendered from the contract', () => {
    const doc = readFileSync(PROTOCOL_DOC_FILE, 'utf8');
    expect(doc, REGENERATE).toBe(renderProtocolDoc(doc));
    for (const cmd of Object.keys(LEARNER_COMMANDS)) expect(doc).toContain(`| \`${cmd}\` |`);
    for (const field of Object.keys(LearnerConfigSchema.shape)) expect(doc).toContain(`| \`${field}\` |`);
  });

  it('every learner command has a request and a result schema; every config field a description', () => {
    for (const [name, c] of Object.entries(LEARNER_COMMANDS)) {
      expect(c.summary.length, name).toBeGreaterThan(10);
      expect(c.request.safeParse({ nonsense: 1 }).success, `${name} refuses unknown arguments`).toBe(false);
    }
    for (const [k, s] of Object.entries(TrainConfigSchema.shape)) expect((s as { description?: string }).description, k).toBeTruthy();
  });
});

describe('flags from the schema', () => {
  it('every field of the training config is a flag, with its help in `train --help`', () => {
    const fields = Object.keys(TrainConfigSchema.shape);
    expect(TRAIN_FLAGS.map((f) => f.field).sort()).toEqual(fields.filter((f) => f !== 'total_steps').sort());
    for (const f of TRAIN_FLAGS) expect(TRAIN_HELP).toContain(`--${f.flag}`);
    // Among them the nine that had no flag before.
    for (const f of [
      'overlong-max',
      'overlong-cache',
      'top-k',
      'top-p',
      'eval-limit',
      'max-resample-rounds',
      'min-lr-ratio',
      'weight-decay',
      'ref-reset-every',
      'max-grad-norm',
    ])
      expect(TRAIN_HELP).toContain(`--${f}`);
  });

  it('flag values are typed by the schema; bad ones name the flag', () => {
    expect(flagValues(TRAIN_FLAGS, { 'top-k': '5', 'per-turn': false, loss: 'dapo', lr: '3e-4' })).toEqual({
      top_k: 5,
      per_turn: false,
      loss: 'dapo',
      lr: 3e-4,
    });
    expect(() => flagValues(TRAIN_FLAGS, { 'top-k': '0.5' })).toThrow(/--top-k must be a non-negative integer, got '0.5'/);
    expect(() => flagValues(TRAIN_FLAGS, { loss: 'ppo' })).toThrow(/--loss must be one of grpo, dapo, dr_grpo, gspo, cispo, got 'ppo'/);
  });
});
