/**
 * The `sql` server's first check of a statement: screening by its first words (writes, ATTACH/DETACH,
 * transactions, PRAGMAs that set something are refused; the query process checks again with
 * SQLite's own flags).
 */
import { ToolError } from './common.ts';

export function refusal(what: string): string {
  return `Only read-only queries (SELECT) are allowed; got ${what}`;
}

const WRITE_WORDS = new Set(['INSERT', 'UPDATE', 'DELETE', 'REPLACE', 'CREATE', 'DROP', 'ALTER', 'VACUUM', 'REINDEX', 'ANALYZE']);
const TRANSACTION_WORDS = new Set(['BEGIN', 'COMMIT', 'END', 'ROLLBACK', 'SAVEPOINT', 'RELEASE']);
/** PRAGMAs that may take an argument in parentheses because it only names what to describe. */
const INTROSPECTION_PRAGMAS = new Set([
  'table_info',
  'table_xinfo',
  'table_list',
  'index_list',
  'index_info',
  'index_xinfo',
  'foreign_key_list',
  'foreign_key_check',
  'integrity_check',
  'quick_check',
]);

interface Token {
  text: string;
  quoted: boolean;
}

/** The first `max` tokens of `sql`, skipping whitespace, comments and leading semicolons. */
function leadingTokens(sql: string, max: number): Token[] {
  const out: Token[] = [];
  let i = 0;
  while (i < sql.length && out.length < max) {
    const c = sql[i]!;
    if (/\s/.test(c) || (c === ';' && out.length === 0)) {
      i++;
    } else if (sql.startsWith('--', i)) {
      const end = sql.indexOf('\n', i);
      i = end < 0 ? sql.length : end + 1;
    } else if (sql.startsWith('/*', i)) {
      const end = sql.indexOf('*/', i + 2);
      i = end < 0 ? sql.length : end + 2;
    } else if (c === '"' || c === "'" || c === '`' || c === '[') {
      const close = c === '[' ? ']' : c;
      let text = '';
      let j = i + 1;
      for (; j < sql.length; j++) {
        if (sql[j] !== close) text += sql[j];
        else if (close !== ']' && sql[j + 1] === close) text += sql[++j];
        else break;
      }
      out.push({ text, quoted: true });
      i = j + 1;
    } else {
      const word = /^[A-Za-z_\u0080-\uffff][\w$\u0080-\uffff]*/.exec(sql.slice(i, i + 200))?.[0] ?? c;
      out.push({ text: word, quoted: false });
      i += word.length;
    }
  }
  return out;
}

/** Throws a ToolError for statements that are not read-only queries, judged by their first words. */
export function screenSql(sql: string): void {
  const [first, ...rest] = leadingTokens(sql, 6);
  if (!first || first.quoted) return; // SQLite says what is wrong with it
  const word = first.text.toUpperCase();
  if (WRITE_WORDS.has(word)) throw new ToolError(refusal('a write statement'));
  if (word === 'ATTACH' || word === 'DETACH') throw new ToolError(refusal(`${word}, which changes the connection`));
  if (TRANSACTION_WORDS.has(word)) throw new ToolError(refusal(`a transaction statement (${word})`));
  if (word === 'PRAGMA') {
    const at = rest[1]?.text === '.' && !rest[1].quoted ? 2 : 0; // PRAGMA schema.name
    const name = rest[at];
    const next = rest[at + 1];
    if (!name || !next || next.quoted) return;
    if (next.text === '=' || (next.text === '(' && !INTROSPECTION_PRAGMAS.has(name.text.toLowerCase()))) {
      throw new ToolError(refusal('a PRAGMA that changes a setting (reading one, as in `PRAGMA name`, is allowed)'));
    }
  }
}
