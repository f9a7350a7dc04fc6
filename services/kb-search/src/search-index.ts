// The knowledge-base index: documents in SQLite with an FTS5 table over title and body, ranked
// by BM25. It is seeded from the shipped corpus when opened; a document is rewritten only when
// its version differs from the stored one, so restarts are cheap and an upgraded corpus takes
// effect on the next start.
// The SQLite part alone: the package's index also loads PostgreSQL's driver, which kb-search never uses.
import { openSqlite } from "@loopguard/sql-store/sqlite";
import type Database from "better-sqlite3";
import type { CorpusDocument } from "./corpus.js";
import { toMatchExpression } from "./query-terms.js";

export interface SearchHit {
  readonly docId: string;
  readonly version: number;
  readonly title: string;
  /** Best matching passage of the body, matched words between [ and ]. */
  readonly snippet: string;
  /** Negated BM25: higher is better. */
  readonly score: number;
  readonly category: string;
}

/** What opening the index changed, by document id. */
export interface SeedReport {
  readonly added: readonly string[];
  readonly updated: readonly string[];
  readonly removed: readonly string[];
  readonly documentCount: number;
}

/** The index could not be read (closed, corrupt or locked database); the caller may retry later. */
export class IndexUnavailableError extends Error {
  override readonly name = "IndexUnavailableError";
}

// A title match says more about what a document is about than a body match.
export const TITLE_WEIGHT = 4;
export const BODY_WEIGHT = 1;
/** Words of context in a snippet; keeps snippets far below the contract's 1000 characters. */
const SNIPPET_TOKENS = 32;
const MAX_SNIPPET_CHARS = 1000;

const SCHEMA = `
  CREATE TABLE IF NOT EXISTS documents (
    rowid    INTEGER PRIMARY KEY,
    doc_id   TEXT NOT NULL UNIQUE,
    version  INTEGER NOT NULL,
    title    TEXT NOT NULL,
    category TEXT NOT NULL
  );
  -- porter: "refunds" and "refunded" find "refund"; remove_diacritics: "cafe" finds "café".
  CREATE VIRTUAL TABLE IF NOT EXISTS documents_fts USING fts5(
    title, body, tokenize = 'porter unicode61 remove_diacritics 2'
  );
`;

interface StoredVersion {
  readonly rowid: number;
  readonly doc_id: string;
  readonly version: number;
}

interface HitRow {
  readonly doc_id: string;
  readonly version: number;
  readonly title: string;
  readonly category: string;
  readonly snippet: string;
  readonly rank: number;
}

function truncate(text: string, maxChars: number): string {
  const chars = Array.from(text);
  return chars.length <= maxChars ? text : `${chars.slice(0, maxChars - 1).join("")}…`;
}

export class SearchIndex {
  private readonly searchStatement: Database.Statement<[string, number], HitRow>;

  private constructor(
    private readonly db: Database.Database,
    readonly seedReport: SeedReport,
  ) {
    this.searchStatement = db.prepare(`
      SELECT d.doc_id, d.version, d.title, d.category,
             snippet(documents_fts, 1, '[', ']', '…', ${SNIPPET_TOKENS}) AS snippet,
             bm25(documents_fts, ${TITLE_WEIGHT}, ${BODY_WEIGHT}) AS rank
        FROM documents_fts JOIN documents d ON d.rowid = documents_fts.rowid
       WHERE documents_fts MATCH ?
       ORDER BY rank, d.doc_id
       LIMIT ?`);
  }

  /** Opens (or creates) the index at `path` (":memory:" for tests) and brings it up to `corpus`. */
  static open(path: string, corpus: readonly CorpusDocument[]): SearchIndex {
    const db = openSqlite(path, { synchronous: "NORMAL" });
    try {
      db.exec(SCHEMA);
      const report = seed(db, corpus);
      return new SearchIndex(db, report);
    } catch (error) {
      db.close();
      throw error;
    }
  }

  /** The best `limit` documents for free text `query`; no words in it means no hits. */
  search(query: string, limit: number): SearchHit[] {
    const match = toMatchExpression(query);
    if (match === undefined) return [];
    let rows: HitRow[];
    try {
      rows = this.searchStatement.all(match, limit);
    } catch (cause) {
      throw new IndexUnavailableError("the knowledge-base index could not be read", { cause });
    }
    return rows.map((row) => ({
      docId: row.doc_id,
      version: row.version,
      title: row.title,
      snippet: truncate(row.snippet.replace(/\s+/g, " ").trim(), MAX_SNIPPET_CHARS),
      score: -row.rank,
      category: row.category,
    }));
  }

  close(): void {
    this.db.close();
  }
}

/** Makes the stored documents equal to `corpus` in one transaction, touching only what changed. */
function seed(db: Database.Database, corpus: readonly CorpusDocument[]): SeedReport {
  const selectStored = db.prepare<[], StoredVersion>("SELECT rowid, doc_id, version FROM documents");
  const insertDocument = db.prepare<[string, number, string, string]>(
    "INSERT INTO documents (doc_id, version, title, category) VALUES (?, ?, ?, ?)",
  );
  const updateDocument = db.prepare<[number, string, string, number]>(
    "UPDATE documents SET version = ?, title = ?, category = ? WHERE rowid = ?",
  );
  const deleteDocument = db.prepare<[number]>("DELETE FROM documents WHERE rowid = ?");
  const insertText = db.prepare<[number | bigint, string, string]>(
    "INSERT INTO documents_fts (rowid, title, body) VALUES (?, ?, ?)",
  );
  const deleteText = db.prepare<[number]>("DELETE FROM documents_fts WHERE rowid = ?");

  const added: string[] = [];
  const updated: string[] = [];
  const removed: string[] = [];
  // IMMEDIATE: two processes starting on one file must not both seed from the same snapshot.
  db.transaction(() => {
    const stored = new Map(selectStored.all().map((row) => [row.doc_id, row]));
    const wanted = new Set(corpus.map((doc) => doc.id));
    for (const row of stored.values()) {
      if (wanted.has(row.doc_id)) continue;
      deleteText.run(row.rowid);
      deleteDocument.run(row.rowid);
      removed.push(row.doc_id);
    }
    for (const doc of corpus) {
      const row = stored.get(doc.id);
      if (row === undefined) {
        const { lastInsertRowid } = insertDocument.run(doc.id, doc.version, doc.title, doc.category);
        insertText.run(lastInsertRowid, doc.title, doc.body);
        added.push(doc.id);
      } else if (row.version !== doc.version) {
        updateDocument.run(doc.version, doc.title, doc.category, row.rowid);
        deleteText.run(row.rowid);
        insertText.run(row.rowid, doc.title, doc.body);
        updated.push(doc.id);
      }
    }
  }).immediate();
  return { added, updated, removed, documentCount: corpus.length };
}
