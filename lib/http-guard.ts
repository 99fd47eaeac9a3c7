/**
 * What the project's HTTP servers (the bundled MCP servers' streamable HTTP, `serve-policy`) share
 * to guard a local endpoint: the bearer token (refused when no request could carry it, compared in
 * constant time, the scheme in any case) and the names the Host and Origin checks accept
 * (localhost names, the bound host and the names given), against DNS rebinding.
 */
import { timingSafeEqual } from 'node:crypto';

export const LOCAL_NAMES = ['localhost', '127.0.0.1', '[::1]'];

/**
 * Why `token` cannot be a bearer token, or undefined when it can. An empty token (an empty
 * `--token ""` or MCP_GYM_TOKEN) would make a server that refuses every request.
 */
export function tokenProblem(token: string): string | undefined {
  if (token === '') return 'is empty: no request could carry it, so every request would be refused';
  if (token.trim() !== token) return 'begins or ends with whitespace, which HTTP drops from header values: no request could carry it';
  if ([...token].some((c) => c < ' ' || c === '\x7f')) return 'holds a control character, which no HTTP header may carry';
  return undefined;
}

/** An invalid option of a server (a command line reports it as a usage error). */
export function invalidOption(message: string): TypeError {
  return Object.assign(new TypeError(message), { code: 'ERR_INVALID_ARG_VALUE' });
}

/**
 * `name` as the Host and Origin checks compare it (what `new URL()` gives as the hostname: lower
 * case, IPv6 in brackets, IDN as punycode), or undefined when it is not a host name.
 */
export function hostName(name: string): string | undefined {
  const given = name.trim();
  const bareIpv6 = !given.startsWith('[') && given.indexOf(':') !== given.lastIndexOf(':');
  const text = bareIpv6 ? `[${given}]` : given;
  if (text === '' || text.replace(/^\[[^\]]*\]/, '').includes(':') || /[/?#@\\]/.test(text)) return undefined;
  try {
    return new URL(`http://${text}`).hostname || undefined;
  } catch {
    return undefined;
  }
}

/**
 * The names a server bound to `host` accepts in Host and Origin: localhost names, the bound host
 * (when it is a name; listen() says what is wrong with one that is not) and `allowedHosts`;
 * throws (invalidOption) for an allowed host that is not a host name.
 */
export function acceptedHostNames(host: string, allowedHosts: string[] = []): string[] {
  const names = (list: string[]) =>
    list.map((name) => {
      const canonical = hostName(name);
      if (canonical === undefined) {
        const hint = /^[^[]*:\d*$|\]:\d*$/.test(name.trim()) ? ': give the name without a port (the check ignores ports)' : '';
        throw invalidOption(`allowed host '${name}' is not a host name${hint}`);
      }
      return canonical;
    });
  const bound = hostName(host);
  return [...new Set([...names(LOCAL_NAMES), ...(bound === undefined ? [] : [bound]), ...names(allowedHosts)])];
}

/** Whether `header` is `Bearer <token>`; the scheme is case-insensitive (RFC 7235 §2.1). */
export function tokenMatches(header: string | undefined, token: string): boolean {
  const m = header === undefined ? null : /^bearer[ \t]+(.*)$/i.exec(header.trim());
  if (!m) return false;
  const given = Buffer.from(m[1]!.trim());
  const want = Buffer.from(token);
  return given.length === want.length && timingSafeEqual(given, want);
}

/**
 * Whether a request's Host header (and Origin, when a browser sent one) names a host of `allowed`
 * (acceptedHostNames): a page on another site cannot reach a local server by DNS rebinding, nor a
 * sandboxed page (`Origin: null`) post to it.
 */
export function hostAllowed(allowed: ReadonlySet<string>, headers: { host?: string; origin?: string }): boolean {
  const h = headers.host;
  if (!h) return false;
  try {
    if (!allowed.has(new URL(`http://${h}`).hostname)) return false;
    const origin = headers.origin;
    // `Origin: null` (a sandboxed frame, a local file, a redirect across origins) names no host: refused too
    if (origin !== undefined && (origin === 'null' || !allowed.has(new URL(origin).hostname))) return false;
  } catch {
    return false;
  }
  return true;
}
