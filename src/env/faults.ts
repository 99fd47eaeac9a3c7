/**
 * Fault injection (`--faults timeout=0.05,error=0.05,malformed=0.02,slow=200ms@0.1,distractors=5`):
 * the environment puts an `EpisodeFaults` between the agent and its tool servers, whatever their
 * transport (bundled, stdio, HTTP), so that a policy meets what real servers do: calls that time
 * out, fail, come back garbled or late, and tools that look right but do not help.
 *
 * - `timeout=p`: the call fails as a timeout does (errorKind `timeout`, the client's own text),
 *   at once, without waiting for the call's limit; it never reaches the server (its state is unchanged).
 * - `error=p`: an `isError` result with the text of a transient server failure (errorKind `tool`);
 *   the call never reaches the server.
 * - `malformed=p`: the call runs, and its result comes back wrong: its text truncated or garbled,
 *   or (for a tool with an output schema) structured content that violates the schema. A result
 *   that is already an error passes unchanged.
 * - `slow=<duration>@p`: the duration is added before the call (a delay at least the call's limit is
 *   a timeout). Drawn apart from the three above: a call may be slow and fail.
 * - `distractors=N`: N extra tools named and described after the real ones (`evaluate_v2`,
 *   `legacy_evaluate`, `calculator_debug`, with the real tool's input schema) that answer with an
 *   error or with nothing useful. Which tools: a function of the seed and the real tools' names,
 *   so every episode of a task sees the same ones.
 *
 * Every draw is a hash of (seed, episode key, call index, what is drawn): the same seed and
 * episode give the same faults, whatever the concurrency. The call index counts the agent's
 * calls that reach a tool (known name, arguments that parse). Only the agent's calls go through
 * here: a task's setup calls and its state checks reach the true server.
 *
 * Marks: a tool step that was tampered with has `fault` (`timeout`, `error`, `malformed`, `slow`,
 * `distractor`; a slow call that also failed is marked by its failure), and the trajectory counts
 * them (`metrics.injected_faults`). The rewards never charge the agent for a sabotaged step
 * (timeout, error, malformed: scored as a call that succeeded, see rewards.ts); a call to a
 * distractor is the agent's choice, scored as it came back (an error, or a result with nothing in it).
 */
import { fnv1a, mulberry32 } from '../../lib/index.ts';
import { errorResult, resultText, type ToolInfo, type ToolResult } from '../tools/index.ts';
import type { AgentTool } from './types.ts';

/** The faults a spec can name. */
export const FAULT_NAMES = ['timeout', 'error', 'malformed', 'slow', 'distractors'] as const;
/** How a tool step was tampered with (ToolStep.fault). */
export type FaultMark = 'timeout' | 'error' | 'malformed' | 'slow' | 'distractor';
/** The marks of calls that were sabotaged: the agent is never charged for them. */
export const SABOTAGE_MARKS: readonly FaultMark[] = ['timeout', 'error', 'malformed'];

export interface FaultSpec {
  /** Probabilities per call; at most one of the three happens to a call (their sum is at most 1). */
  timeout: number;
  error: number;
  malformed: number;
  /** Latency added to a share of the calls, or null. */
  slow: { ms: number; p: number } | null;
  /** Extra tools that do not help. */
  distractors: number;
}

/** A spec that cannot be read: `message` starts with `--faults: `, `detail` is the rest. */
export class FaultSpecError extends Error {
  constructor(readonly detail: string) {
    super(`--faults: ${detail}`);
    this.name = 'FaultSpecError';
  }
}

const EXAMPLE = 'timeout=0.05,error=0.05,malformed=0.02,slow=200ms@0.1,distractors=5';
const MAX_DISTRACTORS = 50;
const MAX_SLOW_MS = 600_000;

function probability(name: string, text: string): number {
  const t = text.trim();
  const pct = t.endsWith('%');
  const n = Number(pct ? t.slice(0, -1) : t);
  if (t === '' || t === '%' || !Number.isFinite(n))
    throw new FaultSpecError(`${name}: '${text}' is not a probability (a number from 0 to 1, e.g. ${name}=0.05)`);
  const p = pct ? n / 100 : n;
  if (p < 0 || p > 1) throw new FaultSpecError(`${name}: ${text} is not a probability: it must be in [0, 1]`);
  return p;
}

function duration(text: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*(ms|s)?\s*$/.exec(text);
  if (!m) throw new FaultSpecError(`slow: '${text}' is not a duration (e.g. 200ms or 1.5s)`);
  const ms = Number(m[1]) * (m[2] === 's' ? 1000 : 1);
  if (ms > MAX_SLOW_MS) throw new FaultSpecError(`slow: ${text} is over the limit of ${MAX_SLOW_MS / 1000} s`);
  return Math.round(ms);
}

/**
 * Reads a fault spec: `name=value` items separated by commas: `timeout=p`, `error=p`,
 * `malformed=p` (probabilities per call, in [0, 1], also as `5%`), `slow=<duration>@p` (`200ms@0.1`,
 * `1.5s@0.2`) and `distractors=N`. Throws a FaultSpecError naming what is wrong.
 */
export function parseFaults(text: string): FaultSpec {
  const spec: FaultSpec = { timeout: 0, error: 0, malformed: 0, slow: null, distractors: 0 };
  const items = text.split(',').map((s) => s.trim());
  if (items.every((s) => s === '')) throw new FaultSpecError(`no faults given; e.g. --faults ${EXAMPLE}`);
  const seen = new Set<string>();
  for (const item of items) {
    if (item === '') throw new FaultSpecError(`an empty item in '${text}' (items are name=value, separated by commas)`);
    const eq = item.indexOf('=');
    const name = (eq < 0 ? item : item.slice(0, eq)).trim();
    const value = eq < 0 ? undefined : item.slice(eq + 1).trim();
    if (!(FAULT_NAMES as readonly string[]).includes(name))
      throw new FaultSpecError(`unknown fault '${name}'; the faults are ${FAULT_NAMES.join(', ')} (e.g. --faults ${EXAMPLE})`);
    if (seen.has(name)) throw new FaultSpecError(`'${name}' is given twice`);
    seen.add(name);
    const form =
      name === 'slow'
        ? 'slow=<duration>@<probability>, e.g. slow=200ms@0.1'
        : name === 'distractors'
          ? 'distractors=<count>, e.g. distractors=5'
          : `${name}=<probability>, e.g. ${name}=0.05`;
    if (value === undefined || value === '') throw new FaultSpecError(`'${name}' needs a value: ${form}`);
    if (name === 'slow') {
      const at = value.split('@');
      if (at.length !== 2) throw new FaultSpecError(`slow: '${value}' is not <duration>@<probability> (${form})`);
      spec.slow = { ms: duration(at[0]!), p: probability('slow', at[1]!) };
    } else if (name === 'distractors') {
      const n = Number(value);
      if (!/^\d+$/.test(value) || n > MAX_DISTRACTORS) throw new FaultSpecError(`distractors: '${value}' is not a count of tools from 0 to ${MAX_DISTRACTORS}`);
      spec.distractors = n;
    } else {
      spec[name as 'timeout' | 'error' | 'malformed'] = probability(name, value);
    }
  }
  const sum = spec.timeout + spec.error + spec.malformed;
  if (sum > 1 + 1e-12)
    throw new FaultSpecError(`timeout + error + malformed add up to ${+sum.toFixed(6)}: a call fails in at most one way, so their sum must be at most 1`);
  return spec;
}

/** The spec as text, in a fixed order (what run.json and reports record); '' for no faults. */
export function formatFaults(spec: FaultSpec): string {
  const out: string[] = [];
  for (const k of ['timeout', 'error', 'malformed'] as const) if (spec[k] > 0) out.push(`${k}=${spec[k]}`);
  if (spec.slow && spec.slow.p > 0 && spec.slow.ms > 0) out.push(`slow=${spec.slow.ms}ms@${spec.slow.p}`);
  if (spec.distractors > 0) out.push(`distractors=${spec.distractors}`);
  return out.join(',');
}

/** Whether a spec injects anything at all. */
export function hasFaults(spec: FaultSpec): boolean {
  return formatFaults(spec) !== '';
}

/** The faults of an environment: a spec (or its text) and the seed of the draws. */
export interface FaultOptions {
  spec: FaultSpec | string;
  /** The run's seed. Default 0. */
  seed?: number;
}

/** What happened to one call. */
export interface FaultedCall {
  result: ToolResult;
  fault?: FaultMark;
}

/** How a distractor is named, described and answers. */
interface DistractorKind {
  name: (tool: string, server: string) => string;
  describe: (description: string, tool: string, server: string) => string;
  answer: (tool: string, real: string, args: unknown) => { text: string; isError: boolean };
}

const DISTRACTORS: DistractorKind[] = [
  {
    name: (t) => `${t}_v2`,
    describe: (d, t) => `${d} (v2 of ${t}: faster, with the new result format.)`,
    answer: (t, real) => ({ text: `Error: ${t} is not enabled on this deployment (feature flag '${real}_v2' is off). Use ${real}.`, isError: true }),
  },
  {
    name: (t) => `legacy_${t}`,
    describe: (d) => `${d} Legacy endpoint, kept for compatibility with older clients.`,
    answer: () => ({ text: 'This endpoint is deprecated and no longer returns data.', isError: false }),
  },
  {
    name: (_t, s) => `${s}_debug`,
    describe: (_d, t, s) => `Debug helper of the ${s} server: runs a request like ${t} with diagnostics.`,
    answer: (_t, _r, args) => ({
      text: `debug: request received (${JSON.stringify(args ?? {}).length} bytes of arguments); tracing is disabled, no result computed.`,
      isError: false,
    }),
  },
  {
    name: (t) => `${t}_batch`,
    describe: (d, t) => `Batch variant of ${t}. ${d}`,
    answer: () => ({ text: 'Error: batch quota exceeded for this API key (0 of 0 batch calls left this hour).', isError: true }),
  },
  {
    name: (t) => `experimental_${t}`,
    describe: (d) => `[Experimental] ${d}`,
    answer: (t) => ({
      text: JSON.stringify({ status: 'queued', job_id: `${t}-${(fnv1a(t) % 100000).toString().padStart(5, '0')}`, result: null }),
      isError: false,
    }),
  },
  {
    name: (t) => `${t}_cached`,
    describe: (d) => `${d} Returns the cached result when there is one (may be stale).`,
    answer: () => ({ text: 'No cached result for these arguments.', isError: false }),
  },
];

const ERROR_TEXTS = [
  'Internal server error: the backend did not answer in time (503 Service Unavailable). Try again later.',
  'Error: rate limit exceeded (429 Too Many Requests); retry after 1 s.',
  'Error: connection reset by peer while the request was being processed.',
  'Error: upstream service unavailable (502 Bad Gateway).',
  'Internal error: database is locked; the operation was not applied.',
];

const GARBLE = '\uFFFD#@%&*?!~^|0123456789';

interface Distractor {
  tool: AgentTool;
  kind: DistractorKind;
  /** The agent's name of the tool it is made from. */
  real: string;
}

/**
 * The faults of one episode: the agent's tools with the distractors added, and each of its calls
 * passed through `call`. Deterministic given the seed, the episode key and the order of the calls.
 */
export class EpisodeFaults {
  readonly spec: FaultSpec;
  private readonly seed: number;
  private calls = 0;
  private readonly distractors = new Map<string, Distractor>();
  private readonly outputSchemas = new Map<string, Record<string, unknown>>();

  constructor(
    options: FaultOptions,
    readonly episodeKey: string,
  ) {
    this.spec = typeof options.spec === 'string' ? parseFaults(options.spec) : options.spec;
    this.seed = options.seed ?? 0;
  }

  /** A number in [0, 1) drawn for call `index` (what: the draw's purpose). */
  private draw(index: number, what: string): number {
    return mulberry32(fnv1a(`${this.seed}\u0000${this.episodeKey}\u0000${index}\u0000${what}`))();
  }

  /**
   * The agent's tools with the distractors added (after the real ones). `listed` gives the real
   * tools' output schemas (for malformed structured content).
   */
  withDistractors(tools: AgentTool[], listed: { server: string; tools: ToolInfo[] }[] = []): AgentTool[] {
    for (const l of listed) for (const t of l.tools) if (t.outputSchema) this.outputSchemas.set(`${l.server}\u0000${t.name}`, t.outputSchema);
    const n = this.spec.distractors;
    if (n === 0 || tools.length === 0) return tools;
    const taken = new Set(tools.map((t) => t.name));
    const candidates: Distractor[] = [];
    for (const t of tools) {
      for (const kind of DISTRACTORS) {
        const name = kind.name(t.name, t.server);
        candidates.push({
          real: t.name,
          kind,
          tool: {
            name,
            description: kind.describe(t.description, t.name, t.server),
            inputSchema: t.inputSchema,
            server: t.server,
            tool: name,
            distractor: true,
          },
        });
      }
    }
    // The same tools for the same seed and servers: an order drawn from a hash of both.
    const rng = mulberry32(
      fnv1a(
        `${this.seed}\u0000distractors\u0000${tools
          .map((t) => `${t.server}.${t.name}`)
          .sort()
          .join(',')}`,
      ),
    );
    for (let i = candidates.length - 1; i > 0; i--) {
      const j = Math.floor(rng() * (i + 1));
      [candidates[i], candidates[j]] = [candidates[j]!, candidates[i]!];
    }
    // More asked for than there are: further versions of the tools (v3, v4, ...).
    for (let v = 3; candidates.length < n + tools.length * DISTRACTORS.length; v++) {
      for (const t of tools) {
        const name = `${t.name}_v${v}`;
        const kind: DistractorKind = { ...DISTRACTORS[0]!, name: () => name };
        candidates.push({
          real: t.name,
          kind,
          tool: { name, description: `${t.description} (v${v} of ${t.name}.)`, inputSchema: t.inputSchema, server: t.server, tool: name, distractor: true },
        });
      }
    }
    const out = [...tools];
    for (const c of candidates) {
      if (this.distractors.size >= n) break;
      if (taken.has(c.tool.name)) continue;
      taken.add(c.tool.name);
      this.distractors.set(c.tool.name, c);
      out.push(c.tool);
    }
    return out;
  }

  /** Whether the agent's tool of this name is a distractor. */
  isDistractor(name: string): boolean {
    return this.distractors.has(name);
  }

  /**
   * One agent call through the faults: `real` makes the true call. `timeoutMs` is the call's limit
   * (named in an injected timeout's text; a slow delay that reaches it is a timeout).
   */
  async call(
    target: AgentTool,
    args: Record<string, unknown>,
    real: () => Promise<ToolResult>,
    o: { timeoutMs: number; signal?: AbortSignal },
  ): Promise<FaultedCall> {
    const index = this.calls++;
    const distractor = this.distractors.get(target.name);
    if (distractor) {
      const a = distractor.kind.answer(target.name, distractor.real, args);
      return {
        result: { content: [{ type: 'text', text: a.text }], isError: a.isError, ms: 0, ...(a.isError ? { errorKind: 'tool' as const } : {}) },
        fault: 'distractor',
      };
    }
    const s = this.spec;
    const u = this.draw(index, 'fail');
    const failure: FaultMark | undefined =
      u < s.timeout ? 'timeout' : u < s.timeout + s.error ? 'error' : u < s.timeout + s.error + s.malformed ? 'malformed' : undefined;
    const delay = s.slow && s.slow.ms > 0 && this.draw(index, 'slow') < s.slow.p ? s.slow.ms : 0;
    if (failure === 'timeout')
      return { result: errorResult('timeout', `The call to tool '${target.tool}' timed out after ${o.timeoutMs} ms`, 0), fault: 'timeout' };
    if (delay > 0) {
      const waited = await sleep(Math.min(delay, o.timeoutMs), o.signal);
      if (!waited) return { result: errorResult('aborted', `The call to tool '${target.tool}' was cancelled`, delay) };
      if (delay >= o.timeoutMs)
        return { result: errorResult('timeout', `The call to tool '${target.tool}' timed out after ${o.timeoutMs} ms`, o.timeoutMs), fault: 'timeout' };
    }
    if (failure === 'error') {
      const text = ERROR_TEXTS[Math.floor(this.draw(index, 'error-text') * ERROR_TEXTS.length)]!;
      return { result: { content: [{ type: 'text', text }], isError: true, ms: delay, errorKind: 'tool' }, fault: 'error' };
    }
    const r = await real();
    const result = delay > 0 ? { ...r, ms: r.ms + delay } : r;
    if (failure === 'malformed' && !r.isError) {
      return {
        result: this.malform(result, target, mulberry32(fnv1a(`${this.seed}\u0000${this.episodeKey}\u0000${index}\u0000malformed`))),
        fault: 'malformed',
      };
    }
    return delay > 0 ? { result, fault: 'slow' } : { result };
  }

  /** A result that is not what the tool returns: its text truncated or garbled, or structured content against its schema. */
  private malform(r: ToolResult, target: AgentTool, rng: () => number): ToolResult {
    const schema = this.outputSchemas.get(`${target.server}\u0000${target.tool}`);
    const structured = r.structured;
    const way = rng();
    if (schema && structured && typeof structured === 'object' && !Array.isArray(structured) && way < 1 / 3) {
      const bad = violate(structured as Record<string, unknown>, schema, rng);
      return { content: [{ type: 'text', text: JSON.stringify(bad) }], structured: bad, isError: false, ms: r.ms };
    }
    const text = resultText(r);
    let out: string;
    if (way < 2 / 3 && text.length >= 4) {
      out = text.slice(0, Math.max(1, Math.floor(text.length * (0.2 + 0.5 * rng()))));
    } else {
      const chars = [...text];
      if (chars.length === 0) chars.push(' ');
      let changed = false;
      for (let i = 0; i < chars.length; i++) {
        if (rng() < 0.35) {
          chars[i] = GARBLE[Math.floor(rng() * GARBLE.length)]!;
          changed = true;
        }
      }
      if (!changed || chars.join('') === text) chars[Math.floor(rng() * chars.length)] = '\uFFFD';
      out = chars.join('');
    }
    return { content: [{ type: 'text', text: out }], isError: false, ms: r.ms };
  }
}

/** Structured content that violates `schema`: each property's value of another type, and a required property left out. */
function violate(value: Record<string, unknown>, schema: Record<string, unknown>, rng: () => number): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) {
    if (typeof v === 'string') out[k] = rng() < 0.5 ? null : Number.isFinite(Number(v)) && v.trim() !== '' ? -Number(v) - 1 : 0;
    else if (typeof v === 'number') out[k] = String(v).split('').reverse().join('') + '?';
    else if (typeof v === 'boolean') out[k] = v ? 'no' : 'yes';
    else if (Array.isArray(v)) out[k] = { items: v.length };
    else if (v && typeof v === 'object') out[k] = [];
    else out[k] = 'undefined';
  }
  const required = Array.isArray(schema.required) ? (schema.required as unknown[]).filter((x): x is string => typeof x === 'string') : [];
  if (required.length > 0) delete out[required[Math.floor(rng() * required.length)]!];
  out.status = 'ok';
  return out;
}

/** Waits `ms`; false when the signal aborted it first. */
function sleep(ms: number, signal?: AbortSignal): Promise<boolean> {
  if (signal?.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const onAbort = () => {
      clearTimeout(t);
      resolve(false);
    };
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve(true);
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** Whether a step was sabotaged (an injected timeout, error or malformed result): never the agent's error. */
export function sabotaged(step: { fault?: string }): boolean {
  return step.fault !== undefined && (SABOTAGE_MARKS as readonly string[]).includes(step.fault);
}

/** The injected faults of trajectories, by mark (only the marks that occur). */
export function faultCounts(trajectories: { turns: { tool_results: { fault?: string }[] }[] }[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const t of trajectories) for (const turn of t.turns) for (const s of turn.tool_results) if (s.fault) out[s.fault] = (out[s.fault] ?? 0) + 1;
  return out;
}
