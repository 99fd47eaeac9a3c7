/**
 * Base URLs of servers given on the command line or in a file (`--base-url`, `--base-urls-file`):
 * what makes one acceptable, and the file format (one URL a line; `#` starts a comment; blank lines
 * are skipped), with errors that name the file and line.
 */

/** Why `url` cannot be a server's base URL (an absolute http or https URL), or undefined when it can. */
export function httpUrlProblem(url: string): string | undefined {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return `'${url}' is not a URL such as http://127.0.0.1:8000/v1`;
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') return `'${url}' is not an http or https URL (such as http://127.0.0.1:8000/v1)`;
  return undefined;
}

/** The URLs of a URL-list file's text: one a line, `#` to the end of a line a comment, blank lines skipped; a bad line throws naming `file:line`. */
export function parseUrlList(text: string, file: string): string[] {
  const urls: string[] = [];
  text.split(/\r?\n/).forEach((raw, i) => {
    const line = raw.replace(/(^|\s)#.*$/, '').trim();
    if (line === '') return;
    if (/\s/.test(line)) throw new Error(`${file}:${i + 1}: one URL a line, got '${line}'`);
    const why = httpUrlProblem(line);
    if (why) throw new Error(`${file}:${i + 1}: ${why}`);
    urls.push(line);
  });
  if (urls.length === 0) throw new Error(`${file}: no URL in it (one URL a line; # starts a comment)`);
  return urls;
}
