/**
 * The child process that runs an agent's JavaScript for a `code` reward check (started by
 * src/env/code-runner.ts, one process per run; not a module to import). It is plain JavaScript
 * so that it starts under bare `node`, whatever loader (tsx, vitest) the parent runs under.
 *
 * The parent starts it under Node's permission model (it may read this file and the lockdown
 * module, nothing else; no writes, child processes or workers), with a heap cap, no environment but
 * PATH, in a network namespace of its own where the system allows, and kills it at the run's
 * deadline. Before anything else it takes the network away from itself (code-runner-lockdown.js). Here the code runs in a `node:vm` context of its own: only the standard
 * built-ins (no require, process, import(), eval/new Function, WebAssembly compilation), a global
 * object without a prototype (so that `this.constructor.constructor` is the sandbox's own Function,
 * not this realm's), inputs handed over as JSON text and parsed inside, results serialised inside,
 * and every entry into the context under a vm `timeout` that ends at the run's deadline. Anything
 * the code throws is described without running its getters out here.
 *
 * Protocol: stdin is one JSON object `{ source, functionName, inputs, deadline, maxResultChars }`
 * (`inputs`: one JSON text per test, of the argument array; `deadline`: epoch ms). stdout is one
 * line `{ results, error?, timedOut? }`, where `results` holds `{ json }` (the return value as JSON
 * text) or `{ error }` for each test that ran, in order; tests after the last one listed did not
 * run (with `timedOut`, the first of them was stopped). The parent compares results with the
 * expected outputs, which never come here.
 */
import { randomBytes } from 'node:crypto';
import { types } from 'node:util';
import vm from 'node:vm';
import { lockDownNetwork } from './code-runner-lockdown.js';

const MAX_STDIN_BYTES = 64 * 1024 * 1024;
const MAX_MESSAGE_CHARS = 1000;
/** How long to wait for a returned promise whose settling needs the event loop (import() does). */
const SETTLE_WAIT_MS = 50;

/** Thrown here when the deadline passes; compared by identity (`instanceof` could run a proxy's trap). */
const TIMED_OUT = Object.freeze({ timedOut: true });

process.on('unhandledRejection', () => {}); // the sandbox's rejected promises are its own business

let reply;
try {
  lockDownNetwork();
  reply = await main(JSON.parse(await readStdin()));
} catch (err) {
  reply = err === TIMED_OUT ? { results: [], timedOut: true } : { results: [], error: `the code runner failed: ${describeSafely(err)}` };
}
process.stdout.write(`${JSON.stringify(reply)}\n`, () => process.exit(0));

async function readStdin() {
  const chunks = [];
  let size = 0;
  for await (const chunk of process.stdin) {
    size += chunk.length;
    if (size > MAX_STDIN_BYTES) throw new Error('input too large');
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

async function main({ source, functionName, inputs, deadline, maxResultChars }) {
  const results = [];
  const key = `__codeRunner_${randomBytes(8).toString('hex')}`;
  const denyImport = () => {
    throw 'import() is not allowed'; // a primitive: an Error made here would hand the code this realm's constructors
  };
  const context = vm.createContext(Object.create(null), {
    name: 'answer',
    codeGeneration: { strings: false, wasm: false },
    microtaskMode: 'afterEvaluate', // promise jobs run inside each entry, under its timeout
  });
  const compile = (code, filename) => new vm.Script(code, { filename, importModuleDynamically: denyImport });
  const enter = (script) => {
    const ms = Math.floor(deadline - Date.now());
    if (ms < 1) throw TIMED_OUT;
    try {
      // displayErrors: false, or Node would read the thrown value's `stack` (a getter, a proxy trap) out here.
      return script.runInContext(context, { timeout: ms, displayErrors: false });
    } catch (err) {
      if (isTimeoutError(err)) throw TIMED_OUT;
      throw err;
    }
  };
  const fail = (error) => ({ results, error });

  enter(compile(`(${harness.toString()})(${JSON.stringify(key)}, ${JSON.stringify(functionName)}, ${maxResultChars});`, 'harness.js'));

  let program;
  try {
    program = compile(source, 'answer.js');
  } catch (err) {
    return fail(`syntax error: ${describeSyntaxError(err)}`);
  }
  try {
    enter(program);
  } catch (err) {
    if (err === TIMED_OUT) return { results, timedOut: true };
    return fail(`the code threw at top level: ${describeSafely(err)}`);
  }

  const getter = `function () { return ${functionName}; }`;
  try {
    const missing = harnessReply(enter(compile(`${key}.find(${getter});`, 'check.js')));
    if (missing) return fail(missing.slice(1));
  } catch (err) {
    if (err === TIMED_OUT) return { results, timedOut: true };
    return fail(`could not look up ${functionName}: ${describeSafely(err)}`);
  }

  const settle = compile(`${key}.settle();`, 'settle.js');
  for (const input of inputs) {
    try {
      let out = harnessReply(enter(compile(`${key}.call(${getter}, ${JSON.stringify(input)});`, 'call.js')));
      const waitUntil = Date.now() + SETTLE_WAIT_MS;
      while (out === 'P' && Date.now() < waitUntil) {
        await new Promise((resolve) => setImmediate(resolve));
        out = harnessReply(enter(settle));
      }
      if (out === 'P') {
        enter(compile(`${key}.forget();`, 'forget.js'));
        results.push({ error: 'returned a promise that did not settle' });
      } else if (out.startsWith('J')) {
        results.push({ json: out.slice(1) });
      } else {
        results.push({ error: out.slice(1) });
      }
    } catch (err) {
      if (err === TIMED_OUT) return { results, timedOut: true };
      results.push({ error: `the test harness failed: ${describeSafely(err)}` });
    }
  }
  return { results };
}

/** A reply of the harness: 'J' + JSON text, 'E' + message, 'P' (a promise is pending) or '' (found). */
function harnessReply(value) {
  if (typeof value !== 'string') return 'Ethe test harness was tampered with';
  return value.length > 1 && value[0] === 'E' ? value.slice(0, MAX_MESSAGE_CHARS + 1) : value;
}

/** vm's timeout error (made in the sandbox's realm, so known by its code), checked without running the sandbox's code. */
function isTimeoutError(err) {
  if (err === null || typeof err !== 'object' || types.isProxy(err)) return false;
  const d = Object.getOwnPropertyDescriptor(err, 'code');
  return d !== undefined && 'value' in d && d.value === 'ERR_SCRIPT_EXECUTION_TIMEOUT';
}

/** True for errors made by this realm (a syntax error), checked without running the sandbox's code. */
function isOwnError(err) {
  let o = err;
  for (let i = 0; i < 100 && o !== null && (typeof o === 'object' || typeof o === 'function'); i++) {
    if (types.isProxy(o)) return false;
    if (o === Error.prototype) return true;
    o = Object.getPrototypeOf(o);
  }
  return false;
}

/** `Name: message` of a thrown value, read from data properties only: no getter or proxy trap runs. */
function describeSafely(err) {
  if (err === null || (typeof err !== 'object' && typeof err !== 'function')) return clip(String(err));
  let name;
  let message;
  let o = err;
  for (let i = 0; i < 100 && o !== null && (name === undefined || message === undefined); i++) {
    if (types.isProxy(o)) break;
    for (const prop of ['name', 'message']) {
      const d = Object.getOwnPropertyDescriptor(o, prop);
      if (d && 'value' in d && typeof d.value === 'string') {
        if (prop === 'name') name ??= d.value;
        else message ??= d.value;
      }
    }
    o = Object.getPrototypeOf(o);
  }
  if (message === undefined) return name ?? 'a value that is not an Error';
  return clip(name ? `${name}: ${message}` : message);
}

/** A syntax error from compiling the code (made by this realm): its message and line. */
function describeSyntaxError(err) {
  if (!isOwnError(err)) return describeSafely(err);
  const line = /^answer\.js:(\d+)/.exec(typeof err.stack === 'string' ? err.stack : '')?.[1];
  return clip(`${err.message}${line ? ` (line ${line})` : ''}`);
}

function clip(text) {
  return text.length > MAX_MESSAGE_CHARS ? `${text.slice(0, MAX_MESSAGE_CHARS)}…` : text;
}

/**
 * Runs inside the sandbox (its source is compiled there) before the agent's code: captures the
 * built-ins it needs, provides CommonJS-style `module.exports`, and installs, under a random,
 * read-only global name, the functions that the parent's scripts call: find (is the function
 * there?), call (run one test) and settle (the outcome of a returned promise). Results are
 * serialised here, under the vm timeout, as strict JSON.
 */
function harness(key, name, maxChars) {
  'use strict';
  const G = globalThis;
  const { apply, defineProperty, getOwnPropertyDescriptor, getPrototypeOf, ownKeys } = Reflect;
  const { isArray } = Array;
  const join = Array.prototype.join;
  const ObjectProto = Object.prototype;
  const toTag = Object.prototype.toString;
  const { stringify, parse } = JSON;
  const PromiseCtor = Promise;
  const {
    resolve: promiseResolve,
    prototype: { then: promiseThen },
  } = Promise;
  const StringCtor = String;
  const freeze = Object.freeze;
  const NOT_JSON = freeze({});
  let notJsonReason = '';
  let pending = null;

  G.module = { exports: {} };
  G.exports = G.module.exports;

  function describe(e) {
    try {
      if (e !== null && (typeof e === 'object' || typeof e === 'function')) {
        const n = e.name;
        const m = e.message;
        if (typeof m === 'string') return typeof n === 'string' && n ? `${n}: ${m}` : m;
      }
      return StringCtor(e);
    } catch {
      return 'a value that cannot be described';
    }
  }

  function lookup(get) {
    let fn;
    try {
      fn = get();
    } catch {
      fn = undefined;
    }
    if (fn === undefined) {
      try {
        const m = G.module;
        const ex = m === null || m === undefined ? undefined : m.exports;
        if (ex !== null && ex !== undefined) fn = ex[name];
        if (fn === undefined && G.exports !== null && G.exports !== undefined) fn = G.exports[name];
      } catch {
        fn = undefined;
      }
    }
    return fn;
  }

  function missing(fn) {
    if (typeof fn === 'function') return '';
    return fn === undefined ? `Efunction ${name} is not defined` : `E${name} is not a function (it is ${fn === null ? 'null' : typeof fn})`;
  }

  function notJson(why) {
    notJsonReason = why;
    throw NOT_JSON;
  }

  function serialize(value) {
    let size = 0;
    const open = []; // the arrays and objects being walked, for cycles
    let depth = 0;
    const grow = (n) => {
      size += n;
      if (size > maxChars) notJson(`the result is larger than ${maxChars} characters of JSON`);
    };
    const walk = (v) => {
      if (v === null) {
        grow(4);
        return 'null';
      }
      switch (typeof v) {
        case 'string': {
          const s = stringify(v);
          grow(s.length);
          return s;
        }
        case 'boolean':
          grow(5);
          return v ? 'true' : 'false';
        case 'number': {
          if (v !== v || v === Infinity || v === -Infinity) notJson(`the result is not JSON: it holds ${StringCtor(v)}`);
          const s = v === 0 ? '0' : stringify(v);
          grow(s.length);
          return s;
        }
        case 'undefined':
          return notJson('the result is not JSON: it is or holds undefined');
        case 'function':
        case 'symbol':
        case 'bigint':
          return notJson(`the result is not JSON: it is or holds a ${typeof v}`);
      }
      if (depth >= 200) notJson('the result is nested more than 200 levels deep');
      for (let i = 0; i < depth; i++) if (open[i] === v) notJson('the result is not JSON: it holds a circular reference');
      open[depth++] = v;
      const parts = [];
      if (isArray(v)) {
        const n = v.length;
        grow(2);
        for (let i = 0; i < n; i++) {
          parts[i] = walk(v[i]);
          grow(1);
        }
        depth--;
        return `[${apply(join, parts, [','])}]`;
      }
      const proto = getPrototypeOf(v);
      if (proto !== ObjectProto && proto !== null) {
        notJson(`the result is not JSON: it holds a ${apply(toTag, v, []).slice(8, -1)}, not a plain object`);
      }
      grow(2);
      const keys = ownKeys(v);
      for (let i = 0; i < keys.length; i++) {
        const k = keys[i];
        if (typeof k !== 'string') continue;
        const d = getOwnPropertyDescriptor(v, k);
        if (!d || !d.enumerable) continue;
        const item = v[k];
        if (item === undefined) continue; // as JSON.stringify does
        const ks = stringify(k);
        grow(ks.length + 2);
        parts[parts.length] = `${ks}:${walk(item)}`;
      }
      depth--;
      return `{${apply(join, parts, [','])}}`;
    };
    return walk(value);
  }

  function result(v) {
    try {
      return `J${serialize(v)}`;
    } catch (e) {
      if (e === NOT_JSON) return `E${notJsonReason}`;
      return `Ethrew while its result was read: ${describe(e)}`;
    }
  }

  function call(get, inputJson) {
    pending = null;
    const fn = lookup(get);
    const absent = missing(fn);
    if (absent) return absent;
    const args = parse(inputJson);
    let r;
    try {
      r = apply(fn, undefined, args);
    } catch (e) {
      return `Ethrew ${describe(e)}`;
    }
    let thenable;
    try {
      thenable = r !== null && (typeof r === 'object' || typeof r === 'function') && typeof r.then === 'function';
    } catch (e) {
      return `Ethrew while its result was read: ${describe(e)}`;
    }
    if (!thenable) return result(r);
    const box = { __proto__: null, done: false, ok: false, value: undefined };
    pending = box;
    try {
      const p = apply(promiseResolve, PromiseCtor, [r]);
      apply(promiseThen, p, [
        (v) => {
          box.done = true;
          box.ok = true;
          box.value = v;
        },
        (e) => {
          box.done = true;
          box.value = e;
        },
      ]);
    } catch (e) {
      pending = null;
      return `Ethrew ${describe(e)}`;
    }
    return 'P';
  }

  function settle() {
    const box = pending;
    if (!box) return 'Eno promise is pending';
    if (!box.done) return 'P';
    pending = null;
    return box.ok ? result(box.value) : `Ethrew ${describe(box.value)}`;
  }

  defineProperty(G, key, {
    value: freeze({
      find: (get) => missing(lookup(get)),
      call,
      settle,
      forget: () => {
        pending = null;
      },
    }),
    writable: false,
    enumerable: false,
    configurable: false,
  });
}
