// YAML for the files this package generates and the manifests it reads back, with the `yaml`
// library in YAML 1.1 mode: Prometheus and Kubernetes read YAML with go-yaml's 1.1 rules, where
// an unquoted `on`, `yes` or `12:30` is not a string, so strings like those must be quoted.
import { parseAllDocuments, stringify } from "yaml";

export type YamlValue = string | number | boolean | null | readonly YamlValue[] | { readonly [key: string]: YamlValue };

const OPTIONS = { version: "1.1", lineWidth: 0 } as const;

function comments(header: readonly string[]): string {
  return header.map((line) => `${`# ${line}`.trimEnd()}\n`).join("");
}

/** The YAML text of `value`, ending with a newline, preceded by `header` comment lines. */
export function toYaml(value: unknown, header: readonly string[] = []): string {
  return comments(header) + stringify(value, OPTIONS);
}

/** Several documents in one stream, separated by `---`, preceded by `header` comment lines. */
export function toYamlDocuments(values: readonly unknown[], header: readonly string[] = []): string {
  return comments(header) + values.map((value) => stringify(value, OPTIONS)).join("---\n");
}

/** Every document of a YAML stream, read as Kubernetes reads it; a syntax error names its position. */
export function parseYamlDocuments(text: string, source: string): unknown[] {
  return parseAllDocuments(text, { version: "1.1" }).flatMap((document) => {
    const [error] = document.errors;
    if (error) throw new Error(`${source}: ${error.message}`);
    const value: unknown = document.toJS();
    return value === null ? [] : [value];
  });
}
