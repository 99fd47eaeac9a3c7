/**
 * The worker thread that runs the `files` server's `search` (started by servers/files-search.ts; not a
 * module to import). It reads the files it is given and matches each line and each file name,
 * so that neither a large sandbox nor a regular expression that backtracks catastrophically
 * (`(a+)+$` on a long line of `a`s) can block the server's event loop: the server terminates
 * this thread when it runs past its deadline. Plain JavaScript so that it starts under bare
 * `node`, whatever loader (tsx, vitest) the parent runs under.
 *
 * Protocol: for each `{ files: [{ abs, rel, size }], query, regex, maxMatches, maxMatchText,
 * maxReadBytes, budgetMs }` it replies `{ ok: true, matches, truncated }` or `{ ok: false,
 * message }`. The files were checked by the server (inside the sandbox, links resolved); they are
 * searched in the order given. Past `budgetMs` the search stops between lines with
 * `truncated: true`; only a single match that runs on is left to the server's deadline.
 */
import { readFileSync } from 'node:fs';
import { parentPort } from 'node:worker_threads';

/** A line cut to at most `max` characters around the match at `index`. */
function excerpt(line, index, max) {
  if (line.length <= max) return line;
  const start = Math.max(0, Math.min(index - max / 4, line.length - max));
  return `${start > 0 ? '…' : ''}${line.slice(start, start + max)}${start + max < line.length ? '…' : ''}`;
}

function basename(rel) {
  const i = rel.lastIndexOf('/');
  return i === -1 ? rel : rel.slice(i + 1);
}

function search({ files, query, regex, maxMatches, maxMatchText, maxReadBytes, budgetMs }) {
  let find;
  if (regex) {
    const re = new RegExp(query); // checked by the server already
    find = (text) => text.search(re);
  } else {
    find = (text) => text.indexOf(query);
  }
  const deadline = Date.now() + budgetMs;
  const matches = [];
  let truncated = false;
  const add = (match) => {
    if (matches.length >= maxMatches) {
      truncated = true;
      return false;
    }
    matches.push(match);
    return true;
  };
  scan: for (const file of files) {
    if (Date.now() > deadline) {
      truncated = true;
      break;
    }
    const name = basename(file.rel);
    if (find(name) >= 0 && !add({ path: file.rel, line: 0, text: name })) break;
    if (file.size > maxReadBytes) continue;
    let buf;
    try {
      buf = readFileSync(file.abs);
    } catch {
      continue; // gone or unreadable since it was listed
    }
    if (buf.length > maxReadBytes || buf.subarray(0, 8000).includes(0)) continue; // grown, or binary
    const lines = buf.toString('utf8').split(/\r?\n/);
    for (let i = 0; i < lines.length; i++) {
      if ((i & 1023) === 1023 && Date.now() > deadline) {
        truncated = true;
        break scan;
      }
      const line = lines[i];
      const index = find(line);
      if (index >= 0 && !add({ path: file.rel, line: i + 1, text: excerpt(line, index, maxMatchText) })) break scan;
    }
  }
  return { matches, truncated };
}

parentPort.on('message', (job) => {
  let reply;
  try {
    reply = { ok: true, ...search(job) };
  } catch (err) {
    reply = { ok: false, message: err instanceof Error ? err.message : String(err) };
  }
  parentPort.postMessage(reply);
});
