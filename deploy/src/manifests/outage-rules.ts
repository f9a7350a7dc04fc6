// The alerts that a tool is out, however little it is called: its Down alert (no target answering,
// one failing after it answered, one in a crash loop, or none at all) and, per unary method, every
// call failing under the burn-rate alerts' traffic floor (MIN_CALLS_PER_HOUR, slo-rules.ts).
import type { DescMethod } from "@bufbuild/protobuf";
import {
  CALLER_GAVE_UP_CODE,
  pascalCase,
  percent,
  type Rule,
  runbookUrl,
  SERVER_FAULT_CODES,
  SEVERITY,
} from "./alert-conventions.js";

/**
 * Under the burn-rate alerts' traffic floor a total outage still shows: every call of a method
 * over `window` failed, at least `minCalls` of them, and none was answered. It pages: every user
 * of the method fails, however few they are; `minCalls` and `for` keep one or two unlucky calls
 * from paging.
 */
export const ALL_FAILING = { window: "1h", minCalls: 3, for: "15m" } as const;

const DOWN_FOR = "1m";
/** A target answering less than this share of its scrapes over DOWN_WINDOW is flapping (a crash loop) and down too. */
const DOWN_WINDOW = "5m";
const MIN_UP_SHARE = 0.9;
/** How long a target that answered and then stopped keeps paging while other targets of its tool answer. */
const ANSWERED_WITHIN = "1h";

/** Every call of the method over the window failed with a server-side code, at least ALL_FAILING.minCalls of them. */
export function allCallsFailingAlert(tool: string, method: DescMethod): Rule {
  const path = `${method.parent.typeName}/${method.name}`;
  const scope = `grpc_service="${method.parent.typeName}",grpc_method="${method.name}"`;
  // `=~` the server-side codes: the failed calls; `!~` those and CANCELLED: every call answered (OK or
  // the caller's mistake). A call its caller gave up on is no answer: a hung tool whose callers also
  // cut some calls short (a session near the end of its wall clock) still pages.
  const calls = (match: "=~" | "!~", codes: readonly string[]) =>
    `sum by (grpc_service, grpc_method) (increase(grpc_server_handled_total{${scope},grpc_code${match}"${codes.join("|")}"}[${ALL_FAILING.window}]))`;
  const answered = calls("!~", [...SERVER_FAULT_CODES, CALLER_GAVE_UP_CODE]);
  return {
    alert: `${pascalCase(tool)}${method.name}AllCallsFailing`,
    expr: `${calls("=~", SERVER_FAULT_CODES)} >= ${ALL_FAILING.minCalls}\nunless on (grpc_service, grpc_method)\n${answered} > 0`,
    for: ALL_FAILING.for,
    labels: { severity: SEVERITY.page, tool, method: method.name },
    annotations: {
      summary: `Every ${tool} ${method.name} call fails`,
      description:
        `Every ${path} call over the last ${ALL_FAILING.window} (at least ${ALL_FAILING.minCalls}, for ${ALL_FAILING.for}) ended with a ` +
        `server-side code (${SERVER_FAULT_CODES.join(", ")}) and none was answered (calls the caller gave up on, ` +
        `${CALLER_GAVE_UP_CODE}, are neither): a total outage, even at a traffic ` +
        "too low for the burn-rate alerts to judge.",
      runbook_url: runbookUrl("toolmethodallcallsfailing"),
    },
  };
}

/**
 * A target's failed scrapes count once it has answered (`resets(up[…])`: a scrape failed after one
 * succeeded), so a pod scraped before it listens (a new pod, one waiting for its schema) among
 * serving ones is not down. Fires for every target while none of the tool's answers (all down,
 * answered before or not), for a target that answered within ANSWERED_WITHIN and fails now, for one
 * that answered and then missed more than 1 − MIN_UP_SHARE of its scrapes over DOWN_WINDOW (a crash
 * loop: up 30 s, down 30 s never holds `up == 0` for DOWN_FOR) and, through absent(), for a tool
 * Prometheus has no target of at all (no ready pod: the ServiceMonitors scrape ready pods only).
 */
export function downAlert(tool: string): Rule {
  const up = `up{job="${tool}"}`;
  const arms = [
    `(${up} == 0 unless on (job) ${up} == 1)`,
    `(${up} == 0 and resets(${up}[${ANSWERED_WITHIN}]) > 0)`,
    `(avg_over_time(${up}[${DOWN_WINDOW}]) < ${MIN_UP_SHARE} and resets(${up}[${DOWN_WINDOW}]) > 0)`,
    `absent(${up})`,
  ];
  return {
    alert: `${pascalCase(tool)}Down`,
    expr: arms.join("\nor\n"),
    for: DOWN_FOR,
    labels: { severity: SEVERITY.page, tool },
    annotations: {
      summary: `${tool} is down`,
      description:
        `{{ if $labels.instance }}Prometheus cannot scrape ${tool} at {{ $labels.instance }}: no target of ${tool} has answered ` +
        `for ${DOWN_FOR}, or this one has failed for ${DOWN_FOR} after answering, or it missed more than ` +
        `${percent(1 - MIN_UP_SHARE)} of its scrapes over ${DOWN_WINDOW} after answering (a crash loop: up, then down, then up again).` +
        `{{ else }}Prometheus has had no scrape target of job "${tool}" for ${DOWN_FOR}: no ${tool} pod is ready, ` +
        `or nothing watches ${tool}.{{ end }}`,
      runbook_url: runbookUrl("tooldown"),
    },
  };
}
