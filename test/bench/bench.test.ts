import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import {
  agentReport,
  BACKTRACKING_SUBJECT,
  fuzzCases,
  generateArguments,
  LatencyStore,
  parseExamples,
  passAtK,
  passHatK,
  readFailures,
  REDOS_PATTERNS,
  renderHtml,
  renderText,
  reportJson,
  runAgentBench,
  runBench,
  schemaValidator,
  sendAndClassify,
  taskStats,
  writeRisk,
  type BenchReport,
  type FuzzOptions,
  type ToolLoad,
} from '../../src/bench/index.ts';
import { splitCommandLine } from '../../lib/index.ts';
import { agentTableRows } from '../../src/bench/report-format.ts';
import { ExpertPolicy, RandomPolicy } from '../../src/agents/index.ts';
import { generateSuite } from '../../src/env/suites/index.ts';
import type { Trajectory } from '../../src/env/index.ts';
import { bundledServer, serveOverHttp, serverFactory } from '../../servers/index.ts';
import { ToolClient } from '../../src/tools/index.ts';
import { CLI, ROOT, runCli } from '../helpers.ts';

const tmp = mkdtempSync(join(tmpdir(), 'mcp-gym-bench-'));
const FRAGILE = fileURLToPath(new URL('./fragile-server.ts', import.meta.url));
const EVERYTHING = join(ROOT, 'node_modules/@modelcontextprotocol/server-everything/dist/index.js');
/** Tools of server-everything left out: network access, 10 s operations, task-only, toggles. */
const EVERYTHING_EXCLUDE = [
  'gzip-file-as-resource',
  'trigger-long-running-operation',
  'simulate-research-query',
  'toggle-simulated-logging',
  'toggle-subscriber-updates',
];
const fragileSpec = { transport: 'stdio' as const, command: process.execPath, args: ['--import', 'tsx', FRAGILE], cwd: ROOT };

const cli = runCli;

/** The figures of a load run are sane: positive, ordered, every level with a rate. */
function expectSane(t: ToolLoad, levels: number[]): void {
  expect(t.calls).toBeGreaterThan(0);
  expect(t.p50_ms).toBeGreaterThan(0);
  expect(t.p50_ms).toBeLessThanOrEqual(t.p95_ms);
  expect(t.p95_ms).toBeLessThanOrEqual(t.p99_ms);
  expect(t.p99_ms).toBeLessThanOrEqual(t.max_ms);
  for (const c of levels) expect(t.calls_per_s[String(c)], `${t.tool} at ${c}`).toBeGreaterThan(0);
  for (const l of t.levels) {
    expect(l.latency.p50_ms).toBeGreaterThan(0);
    expect(l.latency.p50_ms).toBeLessThanOrEqual(l.latency.p99_ms);
    expect(l.latency.p99_ms).toBeLessThanOrEqual(l.latency.max_ms);
  }
}

describe('bench building blocks', () => {
  it('pass@k and pass^k follow the unbiased estimators on known counts', () => {
    expect(passAtK(5, 2, 1)).toBeCloseTo(0.4);
    expect(passAtK(5, 2, 2)).toBeCloseTo(1 - 3 / 10); // 1 − C(3,2)/C(5,2)
    expect(passAtK(5, 2, 4)).toBe(1); // n − c < k: some draw must succeed
    expect(passAtK(10, 3, 5)).toBeCloseTo(1 - 21 / 252); // 1 − C(7,5)/C(10,5)
    expect(passHatK(5, 2, 1)).toBeCloseTo(0.4);
    expect(passHatK(5, 2, 2)).toBeCloseTo(1 / 10); // C(2,2)/C(5,2)
    expect(passHatK(5, 2, 3)).toBe(0);
    expect(passHatK(10, 7, 3)).toBeCloseTo(35 / 120); // C(7,3)/C(10,3)
    expect(passAtK(4, 0, 4)).toBe(0);
    expect(passHatK(4, 4, 4)).toBe(1);
    expect(() => passAtK(3, 1, 4)).toThrow(/k <= n/);

    // Per task, then averaged over tasks.
    const traj = (task: string, success: boolean) =>
      ({
        task_id: task,
        success,
        finish: 'answer',
        metrics: { turns: 2, tool_calls: 1, tool_errors: success ? 0 : 1, policy_tokens: 0 },
        timings: { total_ms: 10, tool_ms: 4, policy_ms: 0, started_at: '' },
      }) as unknown as Trajectory;
    const a = taskStats('a', [traj('a', true), traj('a', false), traj('a', false), traj('a', true)]);
    const b = taskStats('b', [traj('b', true), traj('b', true), traj('b', true), traj('b', true)]);
    expect(a.pass_at).toEqual([0.5, 1 - 1 / 6, 1, 1]);
    expect(a.pass_hat[1]).toBeCloseTo(1 / 6);
    const r = agentReport('p', 4, [a, b], 1);
    expect(r.success_rate).toBeCloseTo(0.75);
    expect(r.pass_at_k['2']).toBeCloseTo((1 - 1 / 6 + 1) / 2);
    expect(r.pass_hat_k['4']).toBeCloseTo((0 + 1) / 2);
    expect(r.tool_errors).toBe(2);
    expect(r.mean_tool_ms).toBeCloseTo(4);
    // A task run fewer than K times has no pass@K or pass^K: '-' in the table both reports draw, and left out of the mean.
    const c = taskStats('c', [traj('c', true), traj('c', true)]);
    const rows = agentTableRows(agentReport('p', 4, [a, b, c], 1));
    expect(rows.map((x) => x[0])).toEqual(['task', 'a', 'b', 'c', 'mean']);
    expect(rows[3]!.slice(1, 6)).toEqual([2, 1, 1, '-', '-']);
    expect(rows[4]![4]).toBeCloseTo(1); // pass@4 over a and b
  });

  it('exact latency quantiles from a preallocated store', () => {
    const s = new LatencyStore(100);
    for (let i = 100; i >= 1; i--) s.record(i);
    s.record(1000); // over capacity: dropped
    expect(s.count).toBe(100);
    const q = s.summary();
    expect([q.min_ms, q.p50_ms, q.p95_ms, q.p99_ms, q.max_ms]).toEqual([1, 50, 95, 99, 100]);
    const h = s.histogram();
    expect(h.counts.reduce((x, y) => x + y, 0)).toBe(100);
    expect(h.edges.length).toBe(h.counts.length + 1);
  });

  it('splits a command line like a shell and reads example files', () => {
    expect(splitCommandLine(`node "my server.js" --name 'a b' x\\ y ""`)).toEqual(['node', 'my server.js', '--name', 'a b', 'x y', '']);
    expect(() => splitCommandLine('node "open')).toThrow(/unterminated/);
    const json = parseExamples('{"get": [{"key": "a"}, {"key": "b"}], "list": [{}]}');
    expect(json.get('get')).toEqual([{ key: 'a' }, { key: 'b' }]);
    const jsonl = parseExamples('// calls\n{"tool": "get", "arguments": {"key": "a"}}\n\n{"tool": "list"}\n');
    expect([...jsonl.entries()]).toEqual([
      ['get', [{ key: 'a' }]],
      ['list', [{}]],
    ]);
    expect(() => parseExamples('{"tool": "get", "arguments": 3}\n{"tool": "x"}', 'ex.jsonl')).toThrow(
      /ex.jsonl:1: the arguments of 'get' must be a JSON object/,
    );
  });

  it('generates arguments that validate against each schema, the same for the same seed', async () => {
    for (const name of ['kv', 'files', 'calculator', 'sql', 'search']) {
      const { factory, backend } = serverFactory(bundledServer(name));
      const client = await ToolClient.connect({ transport: 'inprocess', factory, onClose: () => backend.close() });
      for (const tool of await client.listTools()) {
        const gen = generateArguments(tool.inputSchema, 6, 3);
        expect(gen.valid, `${name}.${tool.name}: ${gen.error}`).toBe(true);
        const check = schemaValidator(tool.inputSchema)!;
        for (const a of gen.args) expect(check(a).valid).toBe(true);
        expect(generateArguments(tool.inputSchema, 6, 3)).toEqual(gen);
        for (const a of gen.args) expect((await client.call({ name: tool.name, arguments: a })).errorKind).not.toBe('invalid_arguments');
      }
      await client.close();
    }
    // Formats, patterns, exclusive bounds.
    const s = {
      type: 'object',
      properties: {
        url: { type: 'string', format: 'uri' },
        code: { type: 'string', pattern: '^[0-9]+$' },
        n: { type: 'integer', exclusiveMinimum: 5, maximum: 7 },
      },
      required: ['url', 'code', 'n'],
    };
    expect(generateArguments(s, 4, 1).valid).toBe(true);
  });

  it('generates the same fuzz inputs for the same seed, covering every kind', () => {
    const tool = {
      name: 't',
      inputSchema: {
        type: 'object',
        properties: {
          s: { type: 'string', maxLength: 10 },
          n: { type: 'integer', minimum: 0 },
          xs: { type: 'array', items: { type: 'number' } },
          o: { type: 'object', properties: { b: { type: 'boolean' } }, required: ['b'] },
        },
        required: ['s'],
      },
    };
    const a = fuzzCases(tool, { seed: 5, count: 60, hugeLength: 1000 });
    const b = fuzzCases(tool, { seed: 5, count: 60, hugeLength: 1000 });
    const c = fuzzCases(tool, { seed: 6, count: 60, hugeLength: 1000 });
    expect(JSON.stringify(a)).toBe(JSON.stringify(b));
    expect(JSON.stringify(a)).not.toBe(JSON.stringify(c));
    expect(a).toHaveLength(60);
    const kinds = new Set(a.map((x) => x.kind));
    for (const k of [
      'missing_required',
      'wrong_type',
      'unknown_field',
      'empty_string',
      'huge_string',
      'deep_nesting',
      'odd_unicode',
      'number_edge',
      'null',
      'out_of_range',
      'huge_array',
      'empty_object',
      'redos',
      'redos_subject',
      'huge_output',
    ]) {
      expect(kinds, k).toContain(k);
    }
    expect(a.find((x) => x.kind === 'huge_string')!.arguments.s).toHaveLength(1000);
    expect(a.find((x) => x.kind === 'missing_required' && x.path === 's')!.arguments).not.toHaveProperty('s');
    expect(a.find((x) => x.kind === 'missing_required' && x.path === 'o.b')).toBeDefined();
    // Few cases still cover many kinds (round-robin across kinds).
    expect(new Set(fuzzCases(tool, { seed: 5, count: 12 }).map((x) => x.kind)).size).toBe(12);
  });

  it('generates pathological inputs: catastrophic regular expressions paired with their subjects, huge outputs within the bounds', () => {
    const tool = {
      name: 'grep',
      inputSchema: {
        type: 'object',
        properties: {
          pattern: { type: 'string', maxLength: 200 },
          text: { type: 'string' },
          regex: { type: 'boolean' },
          count: { type: 'integer', minimum: 1, maximum: 1_000_000 },
          limit: { type: 'integer', minimum: 0 },
          scale: { type: 'number', exclusiveMaximum: 50, multipleOf: 0.5 },
          note: { type: 'string', maxLength: 500 },
          mode: { type: 'string', enum: ['a', 'b'] },
        },
        required: ['pattern'],
      },
    };
    const all = fuzzCases(tool, { seed: 3, count: 1000 });
    expect(JSON.stringify(fuzzCases(tool, { seed: 3, count: 1000 }))).toBe(JSON.stringify(all)); // same seed, same inputs
    // Every catastrophic pattern in the pattern field, with regular expressions switched on and its
    // subject in the text field; optional fields beside it left to their defaults.
    const redos = all.filter((c) => c.kind === 'redos' && c.path === 'pattern');
    expect(redos.map((c) => c.arguments.pattern).sort()).toEqual(REDOS_PATTERNS.map((p) => p.pattern).sort());
    for (const c of redos) {
      const p = REDOS_PATTERNS.find((x) => x.pattern === c.arguments.pattern)!;
      expect(c.arguments).toEqual({ pattern: p.pattern, regex: true, text: p.subject });
    }
    expect(REDOS_PATTERNS.map((p) => p.pattern)).toEqual(expect.arrayContaining(['(a+)+$', '(a|a)*b', '([a-zA-Z]+)*$']));
    expect(BACKTRACKING_SUBJECT).toBe('a'.repeat(40) + '!');
    // Other string fields get a pattern too, and the subject on its own; an enum field gets neither.
    expect(all.some((c) => c.kind === 'redos' && c.path === 'note' && c.arguments.note === '(a+)+$')).toBe(true);
    expect(
      all
        .filter((c) => c.kind === 'redos_subject' && c.path === 'text')
        .map((c) => c.arguments.text)
        .sort(),
    ).toEqual([BACKTRACKING_SUBJECT, 'x'.repeat(40)]);
    expect(all.filter((c) => c.kind === 'redos_subject' && c.path === 'note').map((c) => c.arguments.note)).toEqual([BACKTRACKING_SUBJECT]);
    expect(all.some((c) => ['redos', 'redos_subject'].includes(c.kind) && c.path === 'mode')).toBe(false);
    // Huge outputs, every one within the schema.
    const huge = all.filter((c) => c.kind === 'huge_output');
    const valid = schemaValidator(tool.inputSchema)!;
    for (const c of huge) expect(valid(c.arguments).valid, JSON.stringify(c.arguments).slice(0, 80)).toBe(true);
    const at = (path: string) => huge.filter((c) => c.path === path).map((c) => c.arguments[path]);
    expect(at('count')).toEqual([1_000_000]);
    expect(at('limit').sort()).toEqual([1e6, 1e9]);
    expect(at('scale')).toEqual([49.5]);
    expect(at('note')).toEqual(['a'.repeat(500)]);
    // With few cases, the patterns in the field named like one come first.
    const few = fuzzCases(tool, { seed: 3, count: 20 }).filter((c) => c.kind === 'redos');
    expect(few[0]?.path).toBe('pattern');
  });

  it("tells from a tool's annotations whether calling it may write", () => {
    expect(writeRisk({})).toBeUndefined();
    expect(writeRisk({ annotations: {} })).toBeUndefined();
    expect(writeRisk({ annotations: { readOnlyHint: true } })).toBeUndefined();
    expect(writeRisk({ annotations: { destructiveHint: false } })).toBeUndefined();
    expect(writeRisk({ annotations: { readOnlyHint: false, destructiveHint: true } })).toBe('destructiveHint: true');
    expect(writeRisk({ annotations: { destructiveHint: true } })).toBe('destructiveHint: true');
    expect(writeRisk({ annotations: { readOnlyHint: false } })).toBe('readOnlyHint: false, no destructiveHint (destructive by default)');
    expect(writeRisk({ annotations: { readOnlyHint: false, destructiveHint: false } })).toBe('readOnlyHint: false, destructiveHint: false (it only adds)');
  });
});

describe('load against servers', () => {
  it('mcp-gym bench over stdio (kv): sane figures, process stats, --json last line, --html with an <svg> per chart', async () => {
    const html = join(tmp, 'kv.html');
    // kv keeps its data in memory, one episode at a time: its writing tools are safe to call.
    const r = await cli([
      'bench',
      '--stdio',
      `"${process.execPath}" ${CLI} serve kv`,
      '--calls',
      '40',
      '--concurrency',
      '1,4,16',
      '--duration-ms',
      '3000',
      '--allow-writes',
      '--json',
      '--html',
      html,
    ]);
    expect(r.stderr).not.toMatch(/Error|Warning|warning:/);
    expect(r.code).toBe(0);
    expect(r.stderr).toContain('--allow-writes: calling 5 tools with generated arguments: get, set, delete, list, incr');
    expect(r.stderr).toMatch(/may change or delete data: set \(readOnlyHint: false, no destructiveHint/);
    const lines = r.stdout.trim().split('\n');
    const report = JSON.parse(lines[lines.length - 1]!) as Record<string, unknown> & {
      tools: Record<string, ToolLoad>;
      process: { cpu_ms: number; peak_rss_mb: number };
    };
    expect(report).toMatchObject({ allow_writes: true, skipped: [] });
    expect((report.may_write as { tool: string }[]).map((w) => w.tool)).toEqual(['set', 'delete', 'incr']);
    for (const key of ['connect_ms', 'list_tools_ms', 'tools', 'process']) expect(report).toHaveProperty(key);
    expect(report.connect_ms).toBeGreaterThan(0);
    expect(Object.keys(report.tools).sort()).toEqual(['delete', 'get', 'incr', 'list', 'set']);
    for (const t of Object.values(report.tools)) {
      for (const key of ['p50_ms', 'p99_ms', 'calls_per_s', 'errors']) expect(t).toHaveProperty(key);
      expectSane(t, [1, 4, 16]);
      expect(t.errors, `${t.tool}: ${t.first_error}`).toBe(0);
      expect(t.timeouts).toBe(0);
      expect(t.calls).toBe(120);
    }
    expect(report.process.cpu_ms).toBeGreaterThan(0);
    expect(report.process.peak_rss_mb).toBeGreaterThan(10);
    expect(r.stdout).toMatch(/tool\s+calls\s+p50 ms\s+p95 ms\s+p99 ms\s+max ms\s+c=1\/s\s+c=4\/s\s+c=16\/s/);
    const page = readFileSync(html, 'utf8');
    expect(page.match(/<svg /g)).toHaveLength(5 + 1); // a histogram per tool, throughput against concurrency
    expect(page).not.toMatch(/<script|<link|src=|href=/i);
  });

  it('over streamable HTTP (kv, with a token): sane figures and no false crash reports under fuzz', async () => {
    const serving = await serveOverHttp(bundledServer('kv'), { port: 0, token: 'T0k' });
    try {
      const report = await runBench({
        server: { transport: 'http', url: serving.url, token: 'T0k' },
        calls: 30,
        concurrency: [1, 4],
        fuzz: { count: 12 },
        exclude: ['set', 'delete'],
      });
      expect(report.server).toMatchObject({ transport: 'http', name: 'mcp-gym-kv' });
      // incr may write (readOnlyHint: false): skipped, as no allowWrites; set and delete were excluded.
      expect(Object.keys(report.tools).sort()).toEqual(['get', 'list']);
      expect(report.excluded.sort()).toEqual(['delete', 'set']);
      expect(report.skipped).toEqual([
        { tool: 'incr', reason: 'readOnlyHint: false, no destructiveHint (destructive by default)', annotations: { readOnlyHint: false } },
      ]);
      expect(Object.keys(report.fuzz!.tools).sort()).toEqual(['get', 'list']);
      for (const t of Object.values(report.tools)) {
        expectSane(t, [1, 4]);
        expect(t.errors).toBe(0);
      }
      expect(report.process).toBeUndefined();
      expect(report.fuzz!.totals.cases).toBe(2 * 12);
      expect(report.fuzz!.totals.crash).toBe(0);
      expect(report.fuzz!.totals.hang).toBe(0);
      expect(report.fuzz!.totals.rejected).toBeGreaterThan(0);
    } finally {
      await serving.close();
    }
  });

  it('against the reference server-everything (npm) over stdio: sane figures, zero false crash reports', async () => {
    const failures = join(tmp, 'everything-failures.jsonl');
    const report = await runBench({
      server: { transport: 'stdio', command: process.execPath, args: [EVERYTHING, 'stdio'] },
      calls: 30,
      concurrency: [1, 4, 16],
      exclude: EVERYTHING_EXCLUDE,
      fuzz: { count: 25, timeoutMs: 3000 },
      saveFailuresTo: failures,
    });
    expect(report.server?.name).toMatch(/everything/);
    expect(report.excluded.sort()).toEqual([...EVERYTHING_EXCLUDE].sort());
    expect(report.skipped).toEqual([]); // its tools that may write are among the excluded
    const tools = Object.values(report.tools);
    expect(tools.map((t) => t.tool)).toEqual(expect.arrayContaining(['echo', 'get-sum', 'get-tiny-image']));
    for (const t of tools) {
      expectSane(t, [1, 4, 16]);
      expect(t.args_valid).toBe(true);
      expect(t.errors, `${t.tool}: ${t.first_error}`).toBe(0);
    }
    expect(report.process!.cpu_ms).toBeGreaterThan(0);
    expect(report.process!.peak_rss_mb).toBeGreaterThan(10);
    const f = report.fuzz!;
    expect(f.totals.cases).toBeGreaterThan(100);
    expect(f.totals.crash).toBe(0);
    expect(f.totals.hang).toBe(0);
    expect(f.restarts).toBe(0);
    expect(f.totals.rejected).toBeGreaterThan(0);
    expect(f.failures_file).toBeUndefined(); // nothing to save
    expect(renderText(report)).toMatch(/fuzz: seed 1/);
  });
});

async function readToolSchema(name: string): Promise<Record<string, unknown> | undefined> {
  const client = await ToolClient.connect(fragileSpec);
  try {
    return (await client.listTools()).find((t) => t.name === name)?.inputSchema;
  } finally {
    await client.close();
  }
}

describe('fuzz against a deliberately fragile server', () => {
  it('detects each class (rejected, accepted, protocol error, crash, hang), saves the failures and replays them', async () => {
    const saved = join(tmp, 'fragile-failures.jsonl');
    const strictCases: { args: Record<string, unknown>; outcome: string }[] = [];
    const onCase: NonNullable<FuzzOptions['onCase']> = (tool, _i, _n, c, r) =>
      void (tool === 'strict' && strictCases.push({ args: c.arguments, outcome: r.outcome }));
    const report = await runBench({
      server: fragileSpec,
      calls: 0,
      exclude: ['blocky'],
      fuzz: { count: 30, timeoutMs: 800, seed: 9, onCase },
      saveFailuresTo: saved,
    });
    const t = report.fuzz!.tools;
    expect(t.crashy!.crash).toBe(1); // only the empty string kills it
    expect(t.crashy!.accepted).toBeGreaterThan(0);
    expect(t.crashy!.hang).toBe(0);
    expect(t.hangy!.hang).toBeGreaterThan(0);
    expect(t.hangy!.crash).toBe(0);
    expect(t.hangy!.rejected).toBeGreaterThan(0);
    // The validating tool: nothing but proper rejections, and it accepts exactly the edge cases that are valid.
    expect(t.strict).toMatchObject({ crash: 0, hang: 0, protocol_error: 0 });
    expect(t.strict!.rejected).toBeGreaterThan(20);
    const strictSchema = (await readToolSchema('strict'))!;
    const valid = schemaValidator(strictSchema)!;
    expect(strictCases).toHaveLength(30);
    for (const c of strictCases) expect(c.outcome, JSON.stringify(c.args).slice(0, 100)).toBe(valid(c.args).valid ? 'accepted' : 'rejected');
    expect(t.rude!.protocol_error).toBe(t.rude!.cases);
    expect(report.fuzz!.restarts).toBeGreaterThanOrEqual(1);

    const failures = readFailures(saved);
    expect(failures).toHaveLength(t.crashy!.crash + t.hangy!.hang);
    expect(failures.find((f) => f.outcome === 'crash')).toMatchObject({ tool: 'crashy', arguments: { text: '' }, kind: 'empty_string' });
    for (const f of failures.filter((x) => x.outcome === 'hang')) {
      expect(f.tool).toBe('hangy');
      expect(f.arguments.n as number).toBeLessThan(0);
    }
    // The same seed gives the same inputs, and so the same failures.
    const again = await runBench({
      server: fragileSpec,
      calls: 0,
      exclude: ['strict', 'rude', 'hangy', 'blocky'],
      fuzz: { count: 30, timeoutMs: 800, seed: 9 },
    });
    expect(again.fuzz!.failures.map((f) => JSON.stringify(f.arguments))).toEqual(
      failures.filter((f) => f.tool === 'crashy').map((f) => JSON.stringify(f.arguments)),
    );

    // Replay through the command line: every saved failure reproduces.
    const r = await cli(['bench', '--stdio', `"${process.execPath}" --import tsx ${FRAGILE}`, '--replay', saved, '--timeout-ms', '800', '--json']);
    expect(r.code).toBe(0);
    const lines = r.stdout.trim().split('\n');
    const replay = (JSON.parse(lines[lines.length - 1]!) as { replay: { results: { outcome: string; reproduced: boolean }[]; reproduced: number } }).replay;
    expect(replay.results).toHaveLength(failures.length);
    expect(replay.reproduced).toBe(failures.length);
    expect(r.stdout).toMatch(new RegExp(`replay of .*: ${failures.length} inputs, ${failures.length} reproduced`));
  });

  it('finds a catastrophic regular expression that blocks a server, and the next input is not taken for a crash', async () => {
    const schema = (await readToolSchema('blocky'))!;
    const redos = fuzzCases({ name: 'blocky', inputSchema: schema }, { count: 1000 }).filter((c) => c.kind === 'redos' && c.path === 'pattern');
    const client = await ToolClient.connect({ ...fragileSpec, maxRestartsPerMinute: 100 });
    try {
      const p = redos.find((c) => c.arguments.pattern === '(a+)+$')!;
      expect(p.arguments).toEqual({ pattern: '(a+)+$', text: 'a'.repeat(40) + '!' });
      const pid = client.pid;
      const hung = await sendAndClassify(client, 'blocky', p.arguments, 600);
      expect(hung).toMatchObject({ outcome: 'hang', restarted: true });
      expect(hung.detail).toMatch(/did not answer afterwards and was restarted/);
      expect(client.pid).not.toBe(pid);
      // The server that was killed is not blamed on the next input.
      expect(await sendAndClassify(client, 'blocky', { pattern: 'a+', text: 'aaa' }, 600)).toMatchObject({ outcome: 'accepted', detail: 'true' });
    } finally {
      await client.close();
    }
  });
});

describe('slow tools that report progress', () => {
  it('a call that sends progress notifications is not a hang: each restarts its timeout (resetTimeoutOnProgress), up to a total', async () => {
    const client = await ToolClient.connect({ transport: 'stdio', command: process.execPath, args: [EVERYTHING, 'stdio'] });
    try {
      // server-everything's long-running operation: 2.4 s in 6 steps of 0.4 s, each with a progress notification; a 1 s timeout.
      const args = { duration: 2.4, steps: 6 };
      const ok = await sendAndClassify(client, 'trigger-long-running-operation', args, 1000);
      expect(ok.outcome, ok.detail).toBe('accepted');
      expect(ok.progress).toBeGreaterThanOrEqual(5);
      expect(ok.detail).toMatch(/\(\d progress notifications\)/);
      // Without the reset, as before: a hang.
      const hung = await sendAndClassify(client, 'trigger-long-running-operation', args, 1000, { progressResets: false });
      expect(hung.outcome).toBe('hang');
      // The total still bounds a call that keeps reporting progress.
      const capped = await sendAndClassify(client, 'trigger-long-running-operation', args, 1000, { maxTotalMs: 1500 });
      expect(capped.outcome).toBe('hang');
    } finally {
      await client.close();
    }
  }, 60_000);

  it('load figures keep the calls that succeeded apart from the error path, and warn when most calls fail', async () => {
    const report = await runBench({
      server: fragileSpec,
      calls: 20,
      concurrency: [1],
      exclude: ['crashy', 'hangy', 'blocky', 'rude'],
      examples: new Map([['strict', [{ name: 'ok' }, { name: '' }, { name: '' }, { name: '' }]]]),
    });
    const t = report.tools.strict!;
    expect(t.error_rate).toBeCloseTo(0.75, 1);
    expect(t.ok_p50_ms).toBeGreaterThan(0);
    expect(t.error_p50_ms).toBeGreaterThan(0);
    expect(t.levels[0]!.latency_ok!.count + t.levels[0]!.latency_error!.count).toBe(t.levels[0]!.calls);
    expect(report.warnings.join('\n')).toMatch(/strict: 7\d% of its calls failed .*its figures measure the error path, not the operation/);
  });
});

describe('agent success and reports', () => {
  it('runs K rollouts per task through the environment: pass@k and pass^k per task', async () => {
    const tasks = generateSuite('kv')
      .filter((t) => t.split === 'eval')
      .slice(0, 3);
    const expert = await runAgentBench(new ExpertPolicy(), tasks, { k: 3 });
    expect(expert).toMatchObject({ tasks: 3, episodes: 9, success_rate: 1, failed_episodes: 0 });
    expect(expert.pass_at_k).toEqual({ 1: 1, 2: 1, 3: 1 });
    expect(expert.pass_hat_k['3']).toBe(1);
    expect(expert.mean_tool_calls).toBeGreaterThan(0);
    expect(expert.mean_episode_ms).toBeGreaterThan(0);
    const random = await runAgentBench(new RandomPolicy(3), tasks, { k: 3 });
    expect(random.success_rate).toBeLessThan(1);
    for (const t of random.per_task) {
      expect(t.pass_at[0]).toBeCloseTo(t.successes / t.runs);
      expect(t.pass_hat[2]).toBe(t.successes === 3 ? 1 : 0);
    }

    const report: BenchReport = { concurrency: [1], calls_per_level: 0, tools: {}, excluded: [], warnings: [], agent: expert, seconds: 1 };
    expect(renderText(report)).toMatch(/pass@3/);
    expect(renderHtml(report).match(/<svg /g)).toHaveLength(1);
    expect(reportJson(report)).toHaveProperty('agent.pass_at_k');
  });

  it('mcp-gym bench refuses bad usage with exit code 2', async () => {
    const none = await cli(['bench']);
    expect(none.code).toBe(2);
    expect(none.stderr).toContain('bench needs a server');
    const badLevels = await cli(['bench', '--stdio', 'x', '--concurrency', '1,zero']);
    expect(badLevels.code).toBe(2);
    expect(badLevels.stderr).toContain('--concurrency');
    // No level of 0 or less: refused before any server is started.
    for (const args of [['--concurrency', '0'], ['--concurrency', '4,0'], ['--concurrency', '-1'], ['--concurrency=-3,4'], ['--concurrency', '-2,8']]) {
      const r = await cli(['bench', '--stdio', 'no-such-command-mcp-gym', ...args]);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr, args.join(' ')).toMatch(/^mcp-gym: --concurrency levels must be at least 1 .*got -?\d+.*e\.g\. --concurrency 1,4,16/);
    }
    const unknown = await cli(['bench', '--stdio', 'x', '--no-such-flag']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/no-such-flag/);
    await expect(runBench({ server: { transport: 'stdio', command: 'no-such-command-mcp-gym' }, concurrency: [0] })).rejects.toThrow(
      /concurrency levels must be positive integers, got 0/,
    );
  });
});
