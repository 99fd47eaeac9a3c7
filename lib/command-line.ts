/**
 * Command-line values any command may take: a command line split the way a shell would (a
 * server's `--stdio "node server.js --flag"`), and a success-rate threshold (`--fail-under`).
 */

/** Splits a command line into words like a POSIX shell: quotes ('…', "…") and backslash escapes. */
export function splitCommandLine(line: string): string[] {
  const words: string[] = [];
  let word = '';
  let inWord = false;
  let quote: '"' | "'" | undefined;
  for (let i = 0; i < line.length; i++) {
    const ch = line[i]!;
    if (quote === "'") {
      if (ch === "'") quote = undefined;
      else word += ch;
    } else if (quote === '"') {
      if (ch === '"') quote = undefined;
      else if (ch === '\\' && i + 1 < line.length && '"\\$`\n'.includes(line[i + 1]!)) word += line[++i]!;
      else word += ch;
    } else if (ch === "'" || ch === '"') {
      quote = ch;
      inWord = true;
    } else if (ch === '\\' && i + 1 < line.length) {
      word += line[++i]!;
      inWord = true;
    } else if (/\s/.test(ch)) {
      if (inWord) words.push(word);
      word = '';
      inWord = false;
    } else {
      word += ch;
      inWord = true;
    }
  }
  if (quote) throw new Error(`unterminated ${quote} quote in command line: ${line}`);
  if (inWord) words.push(word);
  return words;
}

/** `--fail-under X`: the value of the flag, checked (a rate from 0 to 1). */
export function parseThreshold(v: string | undefined, flag = '--fail-under'): number | undefined {
  if (v === undefined) return undefined;
  const x = Number(v);
  if (v.trim() === '' || !Number.isFinite(x) || x < 0 || x > 1) throw new RangeError(`${flag} must be a success rate from 0 to 1 (0.8 is 80%), got '${v}'`);
  return x;
}
