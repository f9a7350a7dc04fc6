// What every generated alert carries besides its expression: a severity that says whether it
// wakes someone, and a runbook_url into docs/runbooks.md (a unit test checks each anchor exists).
// Also what every rule file is made of, and the names alerts share.
import type { YamlValue } from "./yaml.js";

export type Rule = { readonly [key: string]: YamlValue };

export type RuleGroup = { readonly name: string; readonly rules: readonly Rule[] };

export type RuleFile = { readonly groups: readonly RuleGroup[] };

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

/** "kb-search" → "KbSearch", the prefix of alert names. */
export function pascalCase(toolName: string): string {
  return toolName
    .split(/[^A-Za-z0-9]+/)
    .filter(Boolean)
    .map((part) => part[0]!.toUpperCase() + part.slice(1))
    .join("");
}

/**
 * Codes that mean the server failed, so they spend the error budget. Caller mistakes
 * (INVALID_ARGUMENT, NOT_FOUND, PERMISSION_DENIED, FAILED_PRECONDITION, …) and load shedding
 * (RESOURCE_EXHAUSTED, answered with RetryInfo) do not.
 */
export const SERVER_FAULT_CODES = [
  "UNKNOWN",
  "DEADLINE_EXCEEDED",
  "UNIMPLEMENTED",
  "INTERNAL",
  "UNAVAILABLE",
  "DATA_LOSS",
] as const;

/**
 * The code of a call its caller gave up on: cancelled it, or sent it a deadline shorter than the
 * method's latency objective, whose expiry the server counts CANCELLED too (tool-sdk's metricsStage)
 * so that one caller's short deadlines spend no error budget. It says nothing of the server either
 * way: neither a fault nor an answer.
 */
export const CALLER_GAVE_UP_CODE = "CANCELLED";
