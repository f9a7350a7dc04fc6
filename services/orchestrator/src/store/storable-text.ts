// Text as both session stores can hold it, written once for both (see sql-session-rows.ts).
/**
 * What PostgreSQL's text and jsonb cannot hold and a model's reply or a tool's text may carry: a
 * NUL (U+0000) and a lone surrogate. Both stores write U+FFFD in their place, so they hold the same.
 */
const UNSTORABLE = /\0|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;
/** The same in JSON text, where JSON.stringify writes both escaped (and only a lone surrogate so): the escape, not itself escaped. */
const UNSTORABLE_ESCAPE = /(?<!\\)((?:\\\\)*)\\u(?:0000|[dD][89a-fA-F][0-9a-fA-F]{2})/g;

export function storable(text: string | null): string | null {
  return text === null ? null : text.replace(UNSTORABLE, "\ufffd");
}

/** JSON text (from JSON.stringify) as both stores can hold it; a cheap look first, as escapes are rare. */
export function storableJson(json: string): string {
  return json.includes("\\u") ? json.replace(UNSTORABLE_ESCAPE, "$1\\ufffd") : json;
}
