// What every generated alert carries besides its expression: a severity that says whether it
// wakes someone, and a runbook_url into docs/runbooks.md (a unit test checks each anchor exists).

/** `critical` pages the on-call now; `warning` is a ticket for working hours. The values kube-prometheus-stack routes on. */
export const SEVERITY = { page: "critical", ticket: "warning" } as const;

/** Repository-relative, so it is right in every clone and fork; the generator has no deploy-specific config to hold a host. */
export const RUNBOOK_DOC = "docs/runbooks.md";

/** `anchor` is the GitHub anchor of the runbook's heading, e.g. "tooldown" for "`<Tool>Down`". */
export function runbookUrl(anchor: string): string {
  return `${RUNBOOK_DOC}#${anchor}`;
}

/** 0.005 → "0.5%", as alert texts and the runbooks write a ratio. */
export function percent(fraction: number): string {
  return `${Number((fraction * 100).toPrecision(6))}%`;
}
