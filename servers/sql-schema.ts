/** The `sql` server's schema description: the tables, their columns, keys and row counts, read once from the database file. */
import Database from 'better-sqlite3';

export interface TableInfo {
  name: string;
  columns: { name: string; type: string; primary_key: boolean; references?: { table: string; column: string } }[];
  row_count: number;
}

function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

export function describeTables(file: string): TableInfo[] {
  const db = new Database(file, { readonly: true, fileMustExist: true });
  try {
    db.pragma('query_only = ON');
    const names = db
      .prepare<[], { name: string }>("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite!_%' ESCAPE '!' ORDER BY rowid")
      .all();
    return names.map(({ name }) => {
      const q = quoteIdent(name);
      const columns = db.pragma(`table_info(${q})`) as { name: string; type: string; pk: number }[];
      const keys = db.pragma(`foreign_key_list(${q})`) as { table: string; from: string; to: string | null }[];
      const row_count = db.prepare<[], { n: number }>(`SELECT count(*) AS n FROM ${q}`).get()?.n ?? 0;
      return {
        name,
        columns: columns.map((c) => {
          const key = keys.find((k) => k.from === c.name);
          return { name: c.name, type: c.type, primary_key: c.pk > 0, ...(key ? { references: { table: key.table, column: key.to ?? 'rowid' } } : {}) };
        }),
        row_count,
      };
    });
  } finally {
    db.close();
  }
}
