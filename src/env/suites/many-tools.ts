/**
 * `many-tools`: tasks that each need 1-3 tools, with every task given the same nine servers and
 * their 91 tools, for the toolbelt and search modes (src/env/tool-modes.ts, `--tools`):
 * - the five bundled servers (calculator, kv, files, search, sql: 20 tools);
 * - three official reference servers from npm, each a process per episode:
 *   `@modelcontextprotocol/server-memory` (9 tools; its graph in a fresh directory per episode),
 *   `@modelcontextprotocol/server-filesystem` (14; a fresh empty directory per episode) and
 *   `@modelcontextprotocol/server-everything` (13: the 12 it always lists and simulate-research-query, which it lists to clients with tasks);
 * - BFCL's multi-turn backends GorillaFileSystem and MathAPI (35 functions, served by BFCL's own
 *   classes over MCP: src/env/bfcl/server.ts, entry multi_turn_base_15, whose file system starts
 *   as an empty `project` directory).
 *
 * Families: the bundled suites' tasks of difficulty 1 and 2 (their own samplers, checks and
 * solutions), and tasks on the other servers: remember a fact (memory: create_entities), relate two
 * entities (create_entities, create_relations), write a file (filesystem: write_file), add two
 * numbers (everything: get-sum) and store the sum (kv: set), a mean (MathAPI: mean), a mean rounded
 * and stored (mean, round_number, kv set), a file written in BFCL's file system (touch, echo). Each
 * is checked on the servers' state after the episode or on the answer. Difficulty: 1 one tool,
 * 2 two tools, 3 two or three tools over two servers; the draw's levels 4 and 5 repeat 2 and 3.
 *
 * A task's prompt names the tools it needs by the names the agent sees: a name two servers share
 * (write_file, read_file, echo, search, delete, add, ...) is qualified with its server (`files_write_file`).
 */
import { createRequire } from 'node:module';
import type { SeededRandom } from '../../../lib/index.ts';
import { bfclServerRef } from '../bfcl/server.ts';
import type { ServerRef } from '../task.ts';
import { calculatorSampler } from './calculator.ts';
import { answerNumber, call, quote, type Candidate, type CheckInput, type Json, type MatcherInput, type Sampler, type Split } from './common.ts';
import { filesSampler } from './files.ts';
import { kvSampler } from './kv.ts';
import { searchSampler } from './search.ts';
import { sqlSampler } from './sql.ts';

const require = createRequire(import.meta.url);

/** A reference server's entry point, resolved where npm installed it; a clear error when it is not. */
function referenceServer(pkg: string): string {
  try {
    return require.resolve(`@modelcontextprotocol/${pkg}/dist/index.js`);
  } catch {
    throw new Error(`the many-tools suite needs the npm package @modelcontextprotocol/${pkg} (npm install @modelcontextprotocol/${pkg})`);
  }
}

/** The BFCL entry whose backends (GorillaFileSystem, MathAPI) the suite serves. */
export const MANY_TOOLS_BFCL_ENTRY = 'multi_turn_base_15';

/** The servers every task of the suite has, by alias. */
export function manyToolsServers(): Record<string, ServerRef> {
  const node = process.execPath;
  return {
    calculator: 'calculator',
    kv: 'kv',
    files: 'files',
    search: 'search',
    sql: 'sql',
    memory: { transport: 'stdio', command: node, args: [referenceServer('server-memory')], fixtures: { env: { MEMORY_FILE_PATH: '{fixture}/memory.jsonl' } } },
    filesystem: { transport: 'stdio', command: node, args: [referenceServer('server-filesystem'), '{fixture}'], fixtures: {} },
    everything: { transport: 'stdio', command: node, args: [referenceServer('server-everything'), 'stdio'] },
    bfcl: bfclServerRef('multi_turn_base', MANY_TOOLS_BFCL_ENTRY),
  };
}

/** Every tool of the suite's servers, by alias (checked against their tools/list by test/env/many-tools.test.ts). */
export const MANY_TOOLS_TOOLS: Record<string, string[]> = {
  calculator: ['add', 'subtract', 'multiply', 'divide', 'evaluate'],
  kv: ['get', 'set', 'delete', 'list', 'incr'],
  files: ['read_file', 'write_file', 'list_dir', 'move', 'delete', 'search'],
  search: ['search', 'open'],
  sql: ['describe_schema', 'query'],
  memory: [
    'create_entities',
    'create_relations',
    'add_observations',
    'delete_entities',
    'delete_observations',
    'delete_relations',
    'read_graph',
    'search_nodes',
    'open_nodes',
  ],
  filesystem: [
    'read_file',
    'read_text_file',
    'read_media_file',
    'read_multiple_files',
    'write_file',
    'edit_file',
    'create_directory',
    'list_directory',
    'list_directory_with_sizes',
    'directory_tree',
    'move_file',
    'search_files',
    'get_file_info',
    'list_allowed_directories',
  ],
  everything: [
    'echo',
    'get-annotated-message',
    'get-env',
    'get-resource-links',
    'get-resource-reference',
    'get-structured-content',
    'get-sum',
    'get-tiny-image',
    'gzip-file-as-resource',
    'simulate-research-query',
    'toggle-simulated-logging',
    'toggle-subscriber-updates',
    'trigger-long-running-operation',
  ],
  bfcl: [
    'cat',
    'cd',
    'cp',
    'diff',
    'du',
    'echo',
    'find',
    'grep',
    'ls',
    'mkdir',
    'mv',
    'pwd',
    'rm',
    'rmdir',
    'sort',
    'tail',
    'touch',
    'wc',
    'absolute_value',
    'add',
    'divide',
    'imperial_si_conversion',
    'logarithm',
    'max_value',
    'mean',
    'min_value',
    'multiply',
    'percentage',
    'power',
    'round_number',
    'si_unit_conversion',
    'square_root',
    'standard_deviation',
    'subtract',
    'sum_values',
  ],
};

/** The name the agent sees for a tool of the suite: `alias_tool` where another server has the same name (as the environment names them). */
export function manyToolsName(alias: string, tool: string): string {
  const clash = Object.entries(MANY_TOOLS_TOOLS).some(([other, tools]) => other !== alias && tools.includes(tool));
  return clash ? `${alias}_${tool}` : tool;
}

/** A bundled task's prompt with the tools its server shares a name with qualified (`write_file` -> `files_write_file`). */
function qualifiedPrompt(prompt: string, servers: Record<string, ServerRef>): string {
  let out = prompt;
  for (const [alias, server] of Object.entries(servers))
    for (const tool of typeof server === 'string' ? (MANY_TOOLS_TOOLS[server] ?? []) : []) {
      const name = manyToolsName(alias, tool);
      if (name !== tool) out = out.replace(new RegExp(`(?<![\\w-])${tool}(?![\\w-])`, 'g'), name);
    }
  return out;
}

const PEOPLE = [
  'Ada Park',
  'Bruno Diaz',
  'Chen Wei',
  'Dana Okafor',
  'Emil Berg',
  'Farah Haddad',
  'Gita Rao',
  'Hugo Lind',
  'Iris Novak',
  'Jonas Weber',
  'Kemi Adeyemi',
  'Lior Ben-Ami',
  'Mara Costa',
  'Nils Holm',
  'Olga Petrova',
  'Paulo Reis',
];
const ORGS = ['Acme Labs', 'Blue Harbor', 'Cedar Works', 'Delta Forge', 'Ember Systems', 'Fjord Analytics', 'Granite Bank', 'Helix Health'];
const ROLES = ['works at', 'founded', 'advises', 'invested in'];
const FACTS = [
  'speaks four languages',
  'runs marathons',
  'collects maps',
  'plays the cello',
  'keeps bees',
  'restores clocks',
  'grows tomatoes',
  'writes poems',
];
const WORDS = [
  'alpha',
  'beacon',
  'copper',
  'delta',
  'ember',
  'falcon',
  'garnet',
  'harbor',
  'indigo',
  'juniper',
  'kestrel',
  'lumen',
  'maple',
  'nickel',
  'onyx',
  'prairie',
];

function state(server: string, tool: string, args: Record<string, Json>, path: string | undefined, expect: MatcherInput): CheckInput {
  return { kind: 'state', call: call(server, tool, args), ...(path ? { path } : {}), expect };
}

function remember(rng: SeededRandom): Candidate {
  const name = rng.pick(PEOPLE);
  const fact = rng.pick(FACTS);
  const entity = { name, entityType: 'person', observations: [fact] };
  return {
    family: 'many.memory_remember',
    params: { name, fact },
    prompt: `Remember in the knowledge graph that ${name} (a person) ${fact}: make ${name} an entity of type person with that observation, using ${manyToolsName('memory', 'create_entities')}. Then answer done.`,
    servers: {},
    checks: [state('memory', 'open_nodes', { names: [name] }, 'entities', { kind: 'equals', value: [entity] })],
    solution: { calls: [call('memory', 'create_entities', { entities: [entity] })], answer: 'done' },
  };
}

function relate(rng: SeededRandom): Candidate {
  const person = rng.pick(PEOPLE);
  const org = rng.pick(ORGS);
  const role = rng.pick(ROLES);
  const relationType = role.replace(/ /g, '_');
  return {
    family: 'many.memory_relate',
    params: { person, org, role },
    prompt: `Record in the knowledge graph that ${person} ${role} ${org}: create the entities ${quote(person)} (type person) and ${quote(org)} (type organization) with no observations, then the relation from ${quote(person)} to ${quote(org)} of type ${quote(relationType)}, using ${manyToolsName('memory', 'create_entities')} and ${manyToolsName('memory', 'create_relations')}. Then answer done.`,
    servers: {},
    checks: [
      state('memory', 'read_graph', {}, 'relations', { kind: 'equals', value: [{ from: person, to: org, relationType }] }),
      state('memory', 'open_nodes', { names: [org] }, 'entities.0.entityType', { kind: 'exact', value: 'organization' }),
    ],
    solution: {
      calls: [
        call('memory', 'create_entities', {
          entities: [
            { name: person, entityType: 'person', observations: [] },
            { name: org, entityType: 'organization', observations: [] },
          ],
        }),
        call('memory', 'create_relations', { relations: [{ from: person, to: org, relationType }] }),
      ],
      answer: 'done',
    },
  };
}

function fsWrite(rng: SeededRandom): Candidate {
  const word = rng.pick(WORDS);
  const n = rng.int(10, 999);
  const path = `${word}-${n}.txt`;
  const content = `${word} ${n}`;
  return {
    family: 'many.filesystem_write',
    params: { word, n },
    prompt: `In the allowed directory of the file system, write a file named ${path} whose whole content is ${quote(content)}, using ${manyToolsName('filesystem', 'write_file')}. Then answer done.`,
    servers: {},
    checks: [state('filesystem', 'read_text_file', { path }, 'content', { kind: 'exact', value: content })],
    solution: { calls: [call('filesystem', 'write_file', { path, content })], answer: 'done' },
  };
}

function sum(rng: SeededRandom, store: boolean): Candidate {
  const a = rng.int(100, 9999);
  const b = rng.int(100, 9999);
  const key = `sum:${a}:${b}`;
  const getSum = manyToolsName('everything', 'get-sum');
  if (!store)
    return {
      family: 'many.everything_sum',
      params: { a, b },
      prompt: `Add ${a} and ${b} with ${getSum}, and answer with the sum only.`,
      servers: {},
      checks: [answerNumber(a + b)],
      solution: { calls: [call('everything', 'get-sum', { a, b })], answer: String(a + b) },
    };
  return {
    family: 'many.everything_sum_kv',
    params: { a, b, store: true },
    prompt: `Add ${a} and ${b} with ${getSum}, then store the sum under the kv key ${quote(key)} with ${manyToolsName('kv', 'set')}. Then answer done.`,
    servers: {},
    checks: [state('kv', 'get', { key }, 'value', { kind: 'number', value: String(a + b) })],
    solution: { calls: [call('everything', 'get-sum', { a, b }), call('kv', 'set', { key, value: String(a + b) })], answer: 'done' },
  };
}

function numbers(rng: SeededRandom, count: number): number[] {
  return Array.from({ length: count }, () => rng.int(1, 99));
}

function mean(rng: SeededRandom, store: boolean): Candidate {
  const xs = numbers(rng, rng.int(3, 6));
  const m = xs.reduce((s, x) => s + x, 0) / xs.length;
  const meanTool = manyToolsName('bfcl', 'mean');
  if (!store)
    return {
      family: 'many.math_mean',
      params: { xs },
      prompt: `Compute the mean of the numbers ${xs.join(', ')} with ${meanTool}, and answer with the mean only.`,
      servers: {},
      checks: [{ kind: 'answer', expect: { kind: 'number', value: m, tolerance: 1e-6 } }],
      solution: { calls: [call('bfcl', 'mean', { numbers: xs })], answer: String(m) },
    };
  const rounded = Math.round(m * 100) / 100;
  const key = `mean:${xs.join('-')}`;
  return {
    family: 'many.math_mean_round_kv',
    params: { xs, store: true },
    prompt: `Compute the mean of the numbers ${xs.join(', ')} with ${meanTool}, round it to 2 decimal places with ${manyToolsName('bfcl', 'round_number')}, and store the rounded mean under the kv key ${quote(key)} with ${manyToolsName('kv', 'set')}. Then answer done.`,
    servers: {},
    // Python's round() and JavaScript's differ on halves: either is right.
    checks: [state('kv', 'get', { key }, 'value', { kind: 'number', value: rounded, tolerance: 0.0051 })],
    solution: {
      calls: [
        call('bfcl', 'mean', { numbers: xs }),
        call('bfcl', 'round_number', { number: m, decimal_places: 2 }),
        call('kv', 'set', { key, value: String(rounded) }),
      ],
      answer: 'done',
    },
  };
}

function gorillaFile(rng: SeededRandom): Candidate {
  const word = rng.pick(WORDS);
  const n = rng.int(10, 99);
  const file = `${word}_${n}.txt`;
  const content = `${word} report ${n}`;
  return {
    family: 'many.gorilla_file',
    params: { word, n },
    prompt: `In the Gorilla file system (the current directory is project), create the file ${file} with ${manyToolsName('bfcl', 'touch')}, then write ${quote(content)} into it with ${manyToolsName('bfcl', 'echo')}. Then answer done.`,
    servers: {},
    checks: [state('bfcl', 'cat', { file_name: file }, 'file_content', { kind: 'exact', value: content })],
    solution: { calls: [call('bfcl', 'touch', { file_name: file }), call('bfcl', 'echo', { content, file_name: file })], answer: 'done' },
  };
}

const BUNDLED: Sampler[] = [calculatorSampler, kvSampler, filesSampler, searchSampler, sqlSampler];

/** A bundled suite's task of difficulty 1 or 2, its prompt's shared tool names qualified. */
function bundled(rng: SeededRandom, difficulty: number, split: Split): Candidate | undefined {
  const c = rng.pick(BUNDLED)(rng, difficulty, split);
  if (!c || c.solution.calls.length > 3) return undefined;
  return { ...c, prompt: qualifiedPrompt(c.prompt, c.servers) };
}

/** Difficulty 1: one tool; 2: two tools; 3: two or three tools over two servers (levels 4 and 5 repeat 2 and 3). */
export const manyToolsSampler: Sampler = (rng, level, split) => {
  const difficulty = level <= 3 ? level : level - 2;
  let c: Candidate | undefined;
  const pick = rng.float();
  if (difficulty === 1)
    c = pick < 0.5 ? bundled(rng, 1, split) : [remember, fsWrite, (r: SeededRandom) => sum(r, false), (r: SeededRandom) => mean(r, false)][rng.int(0, 3)]!(rng);
  else if (difficulty === 2) c = pick < 0.5 ? bundled(rng, 2, split) : rng.chance(0.5) ? relate(rng) : gorillaFile(rng);
  else c = pick < 0.5 ? sum(rng, true) : mean(rng, true);
  if (!c) return undefined;
  return { ...c, difficulty, servers: { ...manyToolsServers(), ...c.servers }, max_turns: c.solution.calls.length + 2 };
};

export const manyToolsSuite = {
  name: 'many-tools',
  description:
    "Tasks of 1-3 tools among 91 tools on 9 servers given to every task: the five bundled servers, the memory, filesystem and everything reference servers, and BFCL's GorillaFileSystem and MathAPI; for --tools toolbelt and search.",
  families: [
    'calculator.arith',
    'kv.*',
    'files.*',
    'search.lookup',
    'sql.*',
    'many.memory_remember',
    'many.memory_relate',
    'many.filesystem_write',
    'many.everything_sum',
    'many.everything_sum_kv',
    'many.math_mean',
    'many.math_mean_round_kv',
    'many.gorilla_file',
  ],
  servers: ['calculator', 'kv', 'files', 'search', 'sql', 'memory', 'filesystem', 'everything', 'bfcl'],
  sampler: manyToolsSampler,
};
