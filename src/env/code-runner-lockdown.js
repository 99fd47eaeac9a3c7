/**
 * Takes the network away from the process that runs an agent's code (src/env/code-runner-child.js
 * calls it before it reads anything), as defence in depth: the code runs in a `node:vm` context
 * that has no `require`, `process` or `import()`, but code that escaped that context into the
 * child's own realm must still open no connection. Node 20's permission model does not cover the
 * network, and under it `process.binding` is refused (so no raw TCP handle can be made), which
 * leaves the JavaScript entry points: every one that opens a connection, listens, sends a datagram
 * or resolves a name is replaced by one that throws, on the objects escaped code could reach
 * (`process.stdout.constructor` is `net.Socket`), and made read-only and not configurable so that
 * it cannot be put back. Where the system allows it, the parent also runs the child in a network
 * namespace of its own, with no interface but a loopback that is down (see code-runner.ts).
 *
 * Plain JavaScript (not TypeScript), like the child, so that it loads under bare `node`.
 */
import dgram from 'node:dgram';
import dns from 'node:dns';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import tls from 'node:tls';

export const NETWORK_DISABLED = 'network access is disabled in the code sandbox';

function refuse() {
  const err = new Error(NETWORK_DISABLED);
  err.code = 'ERR_ACCESS_DENIED';
  throw err;
}

/**
 * Replaces `obj[name]` by `refuse`, read-only and not configurable. Fails (so that no code runs)
 * when that is not possible: the sandbox is closed or it does not run.
 */
function seal(obj, name) {
  if (obj === null || obj === undefined) return;
  const d = Object.getOwnPropertyDescriptor(obj, name);
  if (d && d.value === refuse) return;
  if (d && !d.configurable) throw new Error(`cannot disable the network: ${name} cannot be replaced`);
  Object.defineProperty(obj, name, { value: refuse, writable: false, configurable: false, enumerable: d ? d.enumerable : false });
}

let done = false;

/** Disables every way this process has to reach the network. Idempotent. */
export function lockDownNetwork() {
  if (done) return;
  done = true;
  // The standard streams are made now (they are lazy): their pipe handles need `open`, sealed below.
  const handles = [process.stdin, process.stdout, process.stderr].map((s) => s?._handle).filter((h) => h !== null && typeof h === 'object');
  for (const name of ['connect', 'createConnection', 'createServer']) seal(net, name);
  for (const name of ['connect', 'listen']) seal(net.Socket.prototype, name);
  seal(net.Server.prototype, 'listen');
  // The standard streams' handles (pipes here) are reachable as `process.stdout._handle`: no new ones connect, bind or listen.
  for (const proto of new Set(handles.map((h) => Object.getPrototypeOf(h)))) {
    for (const name of ['connect', 'connect6', 'bind', 'bind6', 'listen', 'open']) if (name in proto) seal(proto, name);
  }
  for (const name of ['connect', 'createServer']) seal(tls, name);
  seal(tls.TLSSocket.prototype, 'connect');
  for (const mod of [http, https]) for (const name of ['request', 'get', 'createServer']) seal(mod, name);
  seal(http.Agent.prototype, 'createConnection');
  seal(https.Agent.prototype, 'createConnection');
  seal(dgram, 'createSocket');
  for (const name of ['bind', 'connect', 'send', 'sendto']) seal(dgram.Socket.prototype, name);
  const resolvers = [
    'lookup',
    'lookupService',
    'resolve',
    'resolve4',
    'resolve6',
    'resolveAny',
    'resolveCaa',
    'resolveCname',
    'resolveMx',
    'resolveNaptr',
    'resolveNs',
    'resolvePtr',
    'resolveSoa',
    'resolveSrv',
    'resolveTxt',
    'reverse',
  ];
  for (const name of resolvers) {
    seal(dns, name);
    seal(dns.promises, name);
    seal(dns.Resolver.prototype, name);
    seal(dns.promises.Resolver.prototype, name);
  }
  for (const name of ['fetch', 'WebSocket', 'EventSource']) {
    if (name in globalThis) seal(globalThis, name);
  }
}
