// The shipped knowledge base: one Markdown file per document under corpus/, each opening with a
// small front-matter block (id, version, title, category). Documents are checked here, when the
// service starts, so a malformed file stops the process instead of producing hits that break
// the response contract later.
import { readdirSync, readFileSync } from "node:fs";
import { basename, join } from "node:path";
import { fileURLToPath } from "node:url";

export interface CorpusDocument {
  /** Stable id a caller cites, e.g. "refund-policy"; also the file name without ".md". */
  readonly id: string;
  /** Bumped whenever the text changes, so callers can cite exactly what they read. */
  readonly version: number;
  readonly title: string;
  readonly category: string;
  readonly body: string;
}

export class CorpusError extends Error {
  override readonly name = "CorpusError";
}

/** The corpus folder of this package; the same relative path from src/ (tests) and dist/ (runtime). */
export const SHIPPED_CORPUS_DIR = fileURLToPath(new URL("../corpus/", import.meta.url));

// Limits mirror the SearchHit rules in kb.proto, so every stored document can be returned.
const ID_PATTERN = /^[a-z0-9][a-z0-9-]{0,63}$/;
const MAX_TITLE_CHARS = 200;
const MAX_CATEGORY_CHARS = 64;
const MAX_VERSION = 0xffff_ffff;

const FRONT_MATTER = /^---\r?\n([\s\S]*?)\r?\n---\r?\n([\s\S]*)$/;

function codePoints(text: string): number {
  let count = 0;
  for (const _ of text) count += 1;
  return count;
}

/** Parses one document file; `source` names it in errors. */
export function parseDocument(text: string, source: string): CorpusDocument {
  const match = FRONT_MATTER.exec(text);
  if (!match) throw new CorpusError(`${source}: missing front matter (--- id/version/title/category ---)`);
  const fields = new Map<string, string>();
  for (const line of (match[1] ?? "").split(/\r?\n/)) {
    if (line.trim() === "") continue;
    const colon = line.indexOf(":");
    if (colon <= 0) throw new CorpusError(`${source}: front-matter line "${line}" is not "key: value"`);
    fields.set(line.slice(0, colon).trim(), line.slice(colon + 1).trim());
  }
  const field = (name: string): string => {
    const value = fields.get(name);
    if (value === undefined || value === "") throw new CorpusError(`${source}: front matter lacks "${name}"`);
    return value;
  };

  const id = field("id");
  if (!ID_PATTERN.test(id)) throw new CorpusError(`${source}: id "${id}" must match ${ID_PATTERN}`);
  const version = Number(field("version"));
  if (!Number.isInteger(version) || version < 1 || version > MAX_VERSION) {
    throw new CorpusError(`${source}: version must be an integer in 1..${MAX_VERSION}`);
  }
  const title = field("title");
  if (codePoints(title) > MAX_TITLE_CHARS)
    throw new CorpusError(`${source}: title is longer than ${MAX_TITLE_CHARS} characters`);
  const category = field("category");
  if (codePoints(category) > MAX_CATEGORY_CHARS) {
    throw new CorpusError(`${source}: category is longer than ${MAX_CATEGORY_CHARS} characters`);
  }
  const body = (match[2] ?? "").trim();
  if (body === "") throw new CorpusError(`${source}: body is empty`);
  return { id, version, title, category, body };
}

/** Reads every `<id>.md` in `dir`, sorted by id; ids must be unique and match their file names. */
export function loadCorpus(dir: string): CorpusDocument[] {
  const files = readdirSync(dir)
    .filter((name) => name.endsWith(".md"))
    .sort();
  if (files.length === 0) throw new CorpusError(`${dir}: no documents (*.md)`);
  return files.map((name) => {
    const doc = parseDocument(readFileSync(join(dir, name), "utf8"), name);
    if (basename(name, ".md") !== doc.id) throw new CorpusError(`${name}: file name must be "${doc.id}.md"`);
    return doc;
  });
}
