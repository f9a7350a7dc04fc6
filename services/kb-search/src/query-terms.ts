// Turns free text into an FTS5 query that cannot fail to parse. FTS5 has its own query
// language (AND/OR/NOT/NEAR, column filters "title:", prefixes "*", "^", parentheses, quotes),
// and a user's question like `refund: "late" (again)?` is a syntax error in it. So the text is
// cut into words, each word becomes a quoted string (inside quotes every character is literal),
// and the words are joined with OR so that any of them can match; BM25 ranks documents that
// match more and rarer words higher. Questions are full of function words ("how do I ..."),
// which would let any short document that happens to contain them rank, so those are left out
// unless the query has nothing else.

/** More words than this add nothing to ranking but cost time in the index; the rest are dropped. */
export const MAX_QUERY_TERMS = 32;

// Letters, digits and combining marks (so "é" written as e + U+0301 stays one word); everything
// else, including FTS5's operator characters, separates words.
const WORD = /[\p{L}\p{N}\p{M}]+/gu;

const STOP_WORDS = new Set(
  (
    "a about all an and any are as at be been but by can could did do does for from get had has have " +
    "how i if in into is it its me my no not of on or our please should so some than that the their them " +
    "there these they this those to was we were what when where which who why will with would you your"
  ).split(" "),
);

/**
 * Distinct words of `text` in order of first appearance, compared case-insensitively, without
 * stop words unless the text has only stop words.
 */
export function queryTerms(text: string): string[] {
  const seen = new Set<string>();
  const words: string[] = [];
  for (const [word] of text.matchAll(WORD)) {
    const key = word.toLowerCase();
    if (seen.has(key)) continue;
    seen.add(key);
    words.push(word);
  }
  const content = words.filter((word) => !STOP_WORDS.has(word.toLowerCase()));
  return (content.length > 0 ? content : words).slice(0, MAX_QUERY_TERMS);
}

/** The FTS5 MATCH expression for `text`, or undefined when it has no words (nothing can match). */
export function toMatchExpression(text: string): string | undefined {
  const terms = queryTerms(text);
  if (terms.length === 0) return undefined;
  // WORD never captures a double quote, so no escaping is needed inside the quotes.
  return terms.map((term) => `"${term}"`).join(" OR ");
}
