// A small, deterministic YAML writer for the config this package generates: maps keep their
// insertion order, strings are written plain when YAML would read them back as the same
// string, single-quoted otherwise (PromQL is full of double quotes), and multi-line strings as
// literal blocks. Enough for Prometheus files without a YAML dependency.

export type YamlValue = string | number | boolean | null | readonly YamlValue[] | { readonly [key: string]: YamlValue };

const PLAIN = /^[A-Za-z_/][A-Za-z0-9_./:-]*$/;
// Prometheus durations such as 5m, which no YAML reader mistakes for a number.
const DURATION = /^[0-9]+(ms|s|m|h|d|w|y)$/;
// Words a YAML 1.1 or 1.2 reader turns into booleans or null.
const RESERVED = /^(true|false|yes|no|on|off|y|n|null|~)$/i;

function scalar(value: string | number | boolean | null): string {
  if (value === null) return "null";
  if (typeof value === "boolean") return String(value);
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new Error(`cannot write ${value} as YAML`);
    return String(value);
  }
  if ((PLAIN.test(value) && !RESERVED.test(value)) || DURATION.test(value)) return value;
  return `'${value.replaceAll("'", "''")}'`;
}

function isScalar(value: YamlValue): value is string | number | boolean | null {
  return value === null || typeof value !== "object";
}

function isEmpty(value: YamlValue): boolean {
  return !isScalar(value) && (Array.isArray(value) ? value.length === 0 : Object.keys(value).length === 0);
}

function block(text: string, indent: string): string {
  if (/^\s/.test(text) || /\s$/.test(text)) return scalar(text);
  return `|-\n${text
    .split("\n")
    .map((line) => (line ? `${indent}${line}` : ""))
    .join("\n")}`;
}

function lines(value: YamlValue, indent: string): string[] {
  if (Array.isArray(value)) {
    return value.flatMap((item: YamlValue) => {
      const inner = lines(item, `${indent}  `);
      if (isScalar(item) || isEmpty(item)) return [`${indent}- ${inline(item, `${indent}  `)}`];
      return [`${indent}- ${inner[0]!.trimStart()}`, ...inner.slice(1)];
    });
  }
  if (isScalar(value)) return [`${indent}${inline(value, indent)}`];
  return Object.entries(value as { readonly [key: string]: YamlValue }).flatMap(([key, item]) => {
    const name = scalar(key);
    if (isScalar(item) || isEmpty(item)) return [`${indent}${name}: ${inline(item, `${indent}  `)}`];
    // Sequences under a key are indented, which every YAML reader accepts and is easier to read.
    return [`${indent}${name}:`, ...lines(item, `${indent}  `)];
  });
}

function inline(value: YamlValue, indent: string): string {
  if (Array.isArray(value)) return "[]";
  if (isScalar(value)) return typeof value === "string" && value.includes("\n") ? block(value, indent) : scalar(value);
  return "{}";
}

/** The YAML text of `value`, ending with a newline, preceded by `header` comment lines. */
export function toYaml(value: YamlValue, header: readonly string[] = []): string {
  return [...header.map((line) => `# ${line}`.trimEnd()), ...lines(value, "")].join("\n") + "\n";
}
