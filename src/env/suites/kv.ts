/**
 * `kv`: multi-step edits of a key-value store. Setup puts the starting keys (the ones the steps
 * need, plus distractors at higher difficulty); the task asks for several operations (set,
 * add/subtract, delete, copy, rename) on distinct keys; state checks read the final store.
 */
import type { TaskCall } from '../task.ts';
import { call, quote, type Candidate, type Json, type Sampler } from './common.ts';

const NAMESPACES = ['user', 'stock', 'score', 'config', 'cart', 'city', 'color', 'team', 'lang', 'note', 'temp', 'price', 'owner', 'level'];
const NAMES = [
  'ada',
  'bob',
  'cleo',
  'dan',
  'eve',
  'finn',
  'gus',
  'hana',
  'ivan',
  'june',
  'kai',
  'lena',
  'milo',
  'nora',
  'otto',
  'pia',
  'quin',
  'rex',
  'sara',
  'tom',
  'uma',
  'vic',
  'wes',
  'yuki',
  'zoe',
  'apple',
  'pear',
  'plum',
  'kiwi',
  'fig',
  'lime',
  'mango',
  'north',
  'south',
  'east',
  'west',
  'alpha',
  'beta',
  'gamma',
  'delta',
  'red',
  'blue',
  'green',
  'gold',
];
const VALUES = [
  'blue',
  'green',
  'amber',
  'violet',
  'lisbon',
  'oslo',
  'lima',
  'quito',
  'dakar',
  'hanoi',
  'draft',
  'ready',
  'done',
  'open',
  'closed',
  'active',
  'paused',
  'english',
  'french',
  'swahili',
  'maple',
  'cedar',
  'birch',
  'falcon',
  'otter',
  'lynx',
  'comet',
];

type KvOp =
  | { op: 'set'; key: string; value: string }
  | { op: 'incr'; key: string; by: string }
  | { op: 'delete'; key: string }
  | { op: 'copy'; from: string; to: string }
  | { op: 'rename'; from: string; to: string };

interface Level {
  steps: number;
  kinds: KvOp['op'][];
  distractors: number;
  /** Digits of the integers stored and added. */
  digits: [number, number];
  negative: boolean;
}

const LEVELS: Record<number, Level> = {
  1: { steps: 1, kinds: ['set', 'incr', 'delete'], distractors: 0, digits: [1, 2], negative: false },
  2: { steps: 2, kinds: ['set', 'incr', 'delete', 'copy'], distractors: 1, digits: [1, 3], negative: false },
  3: { steps: 3, kinds: ['set', 'incr', 'delete', 'copy'], distractors: 3, digits: [2, 4], negative: true },
  4: { steps: 4, kinds: ['set', 'incr', 'delete', 'copy', 'rename'], distractors: 5, digits: [3, 7], negative: true },
  5: { steps: 5, kinds: ['set', 'incr', 'delete', 'copy', 'rename'], distractors: 8, digits: [12, 24], negative: true },
};

function stepText(op: KvOp): string {
  switch (op.op) {
    case 'set':
      return `set ${quote(op.key)} to ${quote(op.value)}`;
    case 'incr':
      return op.by.startsWith('-') ? `subtract ${op.by.slice(1)} from ${quote(op.key)}` : `add ${op.by} to ${quote(op.key)}`;
    case 'delete':
      return `delete ${quote(op.key)}`;
    case 'copy':
      return `copy the value of ${quote(op.from)} to ${quote(op.to)}`;
    case 'rename':
      return `rename ${quote(op.from)} to ${quote(op.to)} (keep the value, remove the old key)`;
  }
}

export const kvSampler: Sampler = (rng, difficulty) => {
  const level = LEVELS[difficulty]!;
  const used = new Set<string>();
  const newKey = (): string => {
    for (;;) {
      const key = `${rng.pick(NAMESPACES)}:${rng.chance(0.3) ? rng.int(1, 99) : rng.pick(NAMES)}`;
      if (!used.has(key)) {
        used.add(key);
        return key;
      }
    }
  };
  const integer = () => rng.digits(rng.int(level.digits[0], level.digits[1]));
  const store = new Map<string, string>();
  const setup: [string, string][] = [];
  const put = (key: string, value: string) => {
    setup.push([key, value]);
    store.set(key, value);
  };

  const ops: KvOp[] = [];
  const calls: TaskCall[] = [];
  const checks: Candidate['checks'] = [];
  const get = (key: string) => call('kv', 'get', { key });
  for (let i = 0; i < level.steps; i++) {
    const kind = i === 0 && level.steps > 1 ? rng.pick(level.kinds.filter((k) => k !== 'set')) : rng.pick(level.kinds);
    switch (kind) {
      case 'set': {
        const key = newKey();
        let value = rng.pick(VALUES);
        if (rng.chance(0.5)) {
          const old = rng.pick(VALUES.filter((v) => v !== value));
          put(key, old);
        }
        if (rng.chance(0.2)) value = integer();
        ops.push({ op: 'set', key, value });
        calls.push(call('kv', 'set', { key, value }));
        checks.push({ kind: 'state', call: get(key), path: 'value', expect: { kind: 'equals', value } });
        break;
      }
      case 'incr': {
        const key = newKey();
        const start = integer();
        put(key, start);
        let by = integer();
        if (level.negative && rng.chance(0.4)) by = `-${by}`;
        const total = (BigInt(start) + BigInt(by)).toString();
        ops.push({ op: 'incr', key, by });
        // Small amounts as JSON numbers, big ones as strings of digits (the tool takes both).
        const byArg: Json = by.replace('-', '').length <= 9 ? Number(by) : by;
        calls.push(call('kv', 'incr', { key, by: byArg }));
        checks.push({ kind: 'state', call: get(key), path: 'value', expect: { kind: 'number', value: total } });
        break;
      }
      case 'delete': {
        const key = newKey();
        put(key, rng.chance(0.5) ? rng.pick(VALUES) : integer());
        ops.push({ op: 'delete', key });
        calls.push(call('kv', 'delete', { key }));
        checks.push({ kind: 'state', call: get(key), path: 'found', expect: { kind: 'equals', value: false } });
        break;
      }
      case 'copy':
      case 'rename': {
        const from = newKey();
        const value = rng.chance(0.7) ? rng.pick(VALUES) : integer();
        put(from, value);
        const ns = from.split(':')[0]!;
        let to = `${rng.pick(['backup', 'old', 'new', 'copy', 'archive'])}:${from.slice(ns.length + 1)}`;
        if (used.has(to)) to = newKey();
        used.add(to);
        ops.push({ op: kind, from, to });
        calls.push(get(from), call('kv', 'set', { key: to, value }));
        checks.push({ kind: 'state', call: get(to), path: 'value', expect: { kind: 'equals', value } });
        if (kind === 'rename') {
          calls.push(call('kv', 'delete', { key: from }));
          checks.push({ kind: 'state', call: get(from), path: 'found', expect: { kind: 'equals', value: false } });
        }
        break;
      }
    }
  }
  const distractors: string[] = [];
  for (let i = 0; i < level.distractors; i++) {
    const key = newKey();
    put(key, rng.chance(0.5) ? rng.pick(VALUES) : integer());
    distractors.push(key);
  }
  if (distractors.length > 0) {
    const key = rng.pick(distractors);
    checks.push({ kind: 'state', call: get(key), path: 'value', expect: { kind: 'equals', value: store.get(key)! } });
  }
  const order = rng.shuffle(setup);
  const steps = ops.map(stepText);
  const prompt =
    `Use the kv tools (get, set, incr, delete) to update the store: ${steps.join('; ')}. ` + `Leave other keys unchanged. When finished, answer done.`;
  return {
    family: ops.length === 1 ? `kv.${ops[0]!.op}` : 'kv.multi',
    params: { ops: ops as unknown as Json, setup: order.map(([k, v]) => [k, v]) },
    prompt,
    servers: { kv: 'kv' },
    setup: order.map(([key, value]) => call('kv', 'set', { key, value })),
    checks,
    solution: { calls, answer: 'done' },
  };
};

export const kvSuite = {
  name: 'kv',
  description:
    'Multi-step edits of a key-value store (set, add/subtract, delete, copy, rename), checked on the final store; more steps, bigger integers and distractor keys as the difficulty grows.',
  families: ['kv.set', 'kv.incr', 'kv.delete', 'kv.multi'],
  servers: ['kv'],
  sampler: kvSampler,
};
