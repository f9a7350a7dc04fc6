// loopguard's operations dashboard: polls the orchestrator's JSON API once a second and renders
// sessions by state, one session's timeline, the tools' SLA figures, the approval queue and the
// trends this orchestrator sampled over the last hour (plots.js). states.js is written by the orchestrator
// from its state machine (api/http-port.ts).
// Plain ES module, no build step. Every piece of data goes into the page as text (textContent,
// attributes), never as markup.

import { renderPlot } from "./plots.js";
import { STATES, TERMINAL } from "./states.js";

const POLL_MS = 1000;
const PAGE_SIZE = 50;
const TOKEN_KEY = "loopguard.token";
const COUNT_LABELS = { TOOL_EXECUTING: "tool call", AWAITING_APPROVAL: "approval" };
const PRESETS = {
  question: { goal: "How long do card refunds take?", task: {} },
  refund: {
    goal: "Refund 10.00 of ord_DEMO00000008 (damaged)",
    task: {
      kind: "refund",
      order_id: "ord_DEMO00000008",
      amount_cents: 1000,
      reason: "DAMAGED",
      id_card: "110101199810246781",
      phone: "+8617712345678",
    },
  },
};

const $ = (id) => {
  const el = document.getElementById(id);
  if (!el) throw new Error(`missing #${id}`);
  return el;
};

/** Builds an element; children are nodes or strings (strings become text nodes). */
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") el.className = value;
    // Through the CSSOM: the page's CSP forbids inline style attributes.
    else if (key === "style") Object.assign(el.style, value);
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

const stateName = (s) => String(s ?? "").replace(/^SESSION_STATE_/, "");
const shortId = (id) => (id.length > 16 ? `${id.slice(0, 12)}…${id.slice(-4)}` : id);

function ago(iso) {
  if (!iso) return "";
  const seconds = Math.round((Date.now() - Date.parse(iso)) / 1000);
  if (seconds < 2) return "just now";
  if (seconds < 60) return `${seconds}s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)}h ago`;
  return new Date(iso).toLocaleString();
}

function stateChip(state) {
  const name = stateName(state);
  return h("span", { class: `chip state-${name.toLowerCase()}`, "data-state": name }, name);
}

function healthBar(score) {
  const value = Number(score ?? 0);
  const tone = value >= 70 ? "good" : value >= 40 ? "warn" : "bad";
  return h(
    "span",
    { class: `health ${tone}`, title: `health ${value}/100` },
    h(
      "span",
      { class: "health-track" },
      h("span", { class: "health-fill", style: { width: `${Math.max(0, Math.min(100, value))}%` } }),
    ),
    h("span", { class: "health-value" }, String(value)),
  );
}

// ---- token ----

const view = {
  token: "",
  paused: false,
  filter: "",
  cursors: [""],
  pageIndex: 0,
  nextCursor: null,
  selected: null,
  lastDetail: "",
  timer: undefined,
};

/** Keeps a #token= link's token and drops the fragment; what went wrong with it, or "". */
function takeTokenFromFragment() {
  const match = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (!match) return "";
  // The token must not stay in the address bar, history or a screenshot, even a mangled one.
  history.replaceState(null, "", location.pathname + location.search);
  try {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(match[1]));
    return "";
  } catch {
    return "The link's token is malformed (not valid percent-encoding). Paste the token instead.";
  }
}

function askForToken(message) {
  view.paused = true;
  $("auth").hidden = false;
  $("auth-message").textContent = message;
  $("sign-out").hidden = !view.token;
  setStatus("needs a token", "bad");
}

/** The token's subject, shown as who approves: the server records that subject, not a typed name. */
function subjectOf(token) {
  try {
    const payload = JSON.parse(atob(token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/")));
    return typeof payload.sub === "string" ? payload.sub : "";
  } catch {
    return "";
  }
}

function useToken(token) {
  view.token = token;
  sessionStorage.setItem(TOKEN_KEY, token);
  $("approver-subject").textContent = subjectOf(token) || "(unknown)";
  $("auth").hidden = true;
  $("sign-out").hidden = false;
  view.paused = false;
  schedule(0);
}

// ---- API ----

// The orchestrator's Connect API (loopguard.orchestrator.v1) over fetch: POST /<Service>/<Method>
// with the request message as JSON; a refusal is a Connect error whose details carry the reason
// (google.rpc.ErrorInfo) and field violations (google.rpc.BadRequest).
const SERVICE = "loopguard.orchestrator.v1.OrchestratorService";

class ApiError extends Error {
  constructor(httpStatus, body) {
    const details = body?.details ?? [];
    const debugOf = (type) => details.find((d) => d.type === type)?.debug ?? {};
    const fields = (debugOf("google.rpc.BadRequest").fieldViolations ?? [])
      .map((v) => `${v.field}: ${v.description}`)
      .join("; ");
    const message = body?.message ?? `HTTP ${httpStatus}`;
    super(fields ? `${message} (${fields})` : message);
    this.httpStatus = httpStatus;
    this.reason = debugOf("google.rpc.ErrorInfo").reason ?? "";
  }
}

async function rpc(method, request = {}) {
  const response = await fetch(`${SERVICE}/${method}`, {
    method: "POST",
    headers: { authorization: `Bearer ${view.token}`, "content-type": "application/json" },
    body: JSON.stringify(request),
    cache: "no-store",
  });
  const payload = await response.json().catch(() => null);
  if (!response.ok) {
    const error = new ApiError(response.status, payload);
    if (response.status === 401) askForToken(`The token was refused: ${error.message}`);
    throw error;
  }
  return payload;
}

function setStatus(text, tone = "") {
  const el = $("status");
  el.textContent = text;
  el.className = `status ${tone}`;
}

// ---- header counts ----

function renderCounts(overview) {
  const nav = $("counts");
  const chip = (state, label, count) =>
    h(
      "button",
      {
        type: "button",
        class: `count ${state ? `state-${state.toLowerCase()}` : "total"}${view.filter === state ? " active" : ""}${count === 0 ? " zero" : ""}`,
        "data-testid": state ? `count-${state}` : "count-total",
        "data-count": count,
        title: state ? `${count} ${state} — show them` : "show all sessions",
        onclick: () => setFilter(state),
      },
      h("span", { class: "count-value" }, String(count)),
      h("span", { class: "count-label" }, label),
    );
  nav.replaceChildren(
    chip("", "total", overview.total),
    ...STATES.map((s) => chip(s, COUNT_LABELS[s] ?? s.toLowerCase(), overview.counts[s] ?? 0)),
  );
}

// ---- sessions table ----

function setFilter(state) {
  view.filter = state;
  $("state-filter").value = state;
  view.cursors = [""];
  view.pageIndex = 0;
  schedule(0);
}

function renderSessions(page) {
  view.nextCursor = page.nextPageToken;
  const rows = page.sessions.map((s) =>
    h(
      "tr",
      {
        "data-testid": "session-row",
        "data-session-id": s.sessionId,
        "data-state": stateName(s.state),
        class: view.selected === s.sessionId ? "selected" : "",
        onclick: () => openSession(s.sessionId),
      },
      h("td", { class: "mono", "data-testid": "cell-id", title: s.sessionId }, shortId(s.sessionId)),
      h("td", { "data-testid": "cell-state" }, stateChip(s.state)),
      h("td", { "data-testid": "cell-stop" }, s.stopReason || "—"),
      h(
        "td",
        { "data-testid": "cell-outcome", title: s.outcome?.reason ?? "" },
        s.outcome ? `${s.outcome.kind}${s.outcome.reason ? ` (${s.outcome.reason})` : ""}` : "—",
      ),
      h("td", { class: "num", "data-testid": "cell-steps" }, `${s.usage?.steps ?? 0}/${s.budget?.maxSteps ?? 0}`),
      h("td", { class: "num", "data-testid": "cell-health" }, healthBar(s.healthScore)),
      h("td", { class: "goal", "data-testid": "cell-goal", title: s.goal }, s.goal),
      h("td", { "data-testid": "cell-updated", title: s.updatedAt }, ago(s.updatedAt)),
    ),
  );
  $("sessions-body").replaceChildren(...rows);
  $("sessions-empty").hidden = rows.length > 0;
  const first = view.pageIndex * PAGE_SIZE + 1;
  $("page-info").textContent =
    rows.length === 0
      ? `page ${view.pageIndex + 1}`
      : `page ${view.pageIndex + 1} · ${first}–${first + rows.length - 1}`;
  $("page-prev").disabled = view.pageIndex === 0;
  $("page-next").disabled = !page.nextPageToken;
}

// ---- tools ----

function renderTools({ tools }) {
  $("tools-body").replaceChildren(
    ...tools.map((t) =>
      h(
        "tr",
        { "data-testid": "tool-row", "data-tool": t.tool },
        h("td", { class: "mono", title: t.service }, t.tool),
        h("td", {}, h("span", { class: `chip breaker-${t.breaker}`, "data-testid": "tool-breaker" }, t.breaker)),
        h("td", { class: "num", "data-testid": "tool-p95" }, t.p95Ms === undefined ? "—" : `${t.p95Ms} ms`),
        h(
          "td",
          {
            class: `num ${t.errorRate > 0.05 ? "bad-text" : ""}`,
            "data-testid": "tool-error-rate",
            title: outcomeSummary(t.outcomes),
          },
          `${(t.errorRate * 100).toFixed(1)}%`,
        ),
        h("td", { class: "num", "data-testid": "tool-fallbacks" }, String(t.fallbacksServed)),
        h("td", { class: "num", "data-testid": "tool-calls" }, String(t.calls)),
      ),
    ),
  );
}

const outcomeSummary = (outcomes) =>
  Object.entries(outcomes)
    .map(([k, v]) => `${k}: ${v}`)
    .join(", ") || "no calls yet";

// ---- trends ----

const percent = (v) => (v === null || v === undefined ? "—" : `${Math.round(v * 1000) / 10}%`);
const millis = (v) => (v === null || v === undefined ? "—" : `${Math.round(v)} ms`);
/** A SampleValue column (unset where nothing was measured) as numbers and nulls. */
const column = (samples) => samples.map((s) => (typeof s.value === "number" ? s.value : null));

function renderSeries({ at = [], sessions = [], tools = [], patrolSuccessRatio = [], intervalMs = 0 }) {
  const times = at.map((t) => Date.parse(t));
  $("trends-window").textContent = intervalMs ? `last hour · every ${intervalMs / 1000} s` : "last hour";
  renderPlot($("plot-sessions"), {
    title: "Sessions by state",
    times,
    series: sessions.filter((s) => s.counts.some((n) => n > 0)).map((s) => ({ name: s.state, values: s.counts })),
    format: (v) => (v === undefined ? "—" : Number.isInteger(v) ? String(v) : v.toFixed(1)),
    empty: sessions.length === 0 ? "needs sessions:admin" : "no sessions yet",
  });
  renderPlot($("plot-tool-p95"), {
    title: "Tool p95 latency",
    times,
    series: tools.map((t) => ({ name: t.tool, values: column(t.p95Ms) })),
    format: millis,
    empty: "no tool calls yet",
  });
  renderPlot($("plot-tool-errors"), {
    title: "Tool error ratio",
    times,
    series: tools.map((t) => ({ name: t.tool, values: column(t.errorRatio) })),
    format: percent,
    yMax: 1,
    empty: "no tool calls yet",
  });
  renderPlot($("plot-patrol"), {
    title: "Patrol success rate",
    times,
    series: [{ name: "golden set", values: column(patrolSuccessRatio) }],
    format: percent,
    yMax: 1,
    empty: "no patrol run yet",
  });
}

// ---- approvals ----

// The decision names the approval shown (id and arguments hash): if the session has moved on to
// another action meanwhile, the server refuses it (409) and nothing is approved.
async function resolveApproval(sessionId, approval, action, reasonInput, item) {
  for (const button of item.querySelectorAll("button")) button.disabled = true;
  const message = item.querySelector(".approval-message");
  try {
    const body = {
      approvalId: approval.approvalId,
      argumentsHash: approval.argumentsHash,
      reason: reasonInput.value.trim(),
    };
    await rpc("ResolveApproval", { ...body, sessionId, approve: action === "approve" });
    message.textContent = action === "approve" ? "approved" : "denied";
    schedule(0);
  } catch (error) {
    message.textContent = error.message;
    message.classList.add("bad-text");
    for (const button of item.querySelectorAll("button")) button.disabled = false;
  }
}

function approvalItem(s) {
  const a = s.pendingApproval ?? {};
  const reason = h("input", {
    class: "approval-reason",
    "data-testid": "approval-reason",
    placeholder: "reason (optional)",
    maxlength: 500,
  });
  const item = h(
    "li",
    {
      class: "approval",
      "data-testid": "approval-item",
      "data-session-id": s.sessionId,
      "data-approval-id": a.approvalId ?? "",
      "data-arguments-hash": a.argumentsHash ?? "",
    },
    h(
      "div",
      { class: "approval-head" },
      h(
        "button",
        { type: "button", class: "link mono", onclick: () => openSession(s.sessionId), title: s.sessionId },
        shortId(s.sessionId),
      ),
      h("span", { class: "chip tool" }, a.tool ?? "?"),
      h("span", { class: "muted expires", "data-expires": a.expiresAt ?? "" }, ""),
    ),
    h("div", { class: "approval-goal" }, s.goal),
    h(
      "div",
      { class: "muted approval-creator", "data-testid": "approval-creator" },
      `started by ${s.createdBy || "unknown"}`,
    ),
    h("div", { class: "approval-why" }, a.reason ?? ""),
    h("code", { class: "approval-args" }, JSON.stringify(a.arguments ?? {})),
    h(
      "div",
      { class: "approval-actions" },
      reason,
      h(
        "button",
        {
          type: "button",
          class: "approve",
          "data-testid": "approve",
          onclick: () => resolveApproval(s.sessionId, a, "approve", reason, item),
        },
        "Approve",
      ),
      h(
        "button",
        {
          type: "button",
          class: "deny",
          "data-testid": "deny",
          onclick: () => resolveApproval(s.sessionId, a, "deny", reason, item),
        },
        "Deny",
      ),
    ),
    h("div", { class: "approval-message", "data-testid": "approval-message", role: "status" }),
  );
  return item;
}

function renderApprovals({ approvals, more }) {
  const list = $("approvals");
  // Keyed update: an item already shown keeps its element, so a reason being typed survives the poll;
  // keyed by the approval, not the session: a session that waits on a new approval gets a new item.
  const wanted = new Map(approvals.map((s) => [s.sessionId, s]));
  for (const item of [...list.children]) {
    const s = wanted.get(item.dataset.sessionId);
    const a = s?.pendingApproval ?? {};
    const same =
      (a.approvalId ?? "") === item.dataset.approvalId && (a.argumentsHash ?? "") === item.dataset.argumentsHash;
    if (!s || !same) item.remove();
  }
  const shown = new Set([...list.children].map((item) => item.dataset.sessionId));
  for (const s of approvals) if (!shown.has(s.sessionId)) list.append(approvalItem(s));
  for (const el of list.querySelectorAll(".expires")) {
    const seconds = Math.round((Date.parse(el.dataset.expires) - Date.now()) / 1000);
    el.textContent = Number.isFinite(seconds)
      ? seconds > 0
        ? `expires in ${seconds >= 120 ? `${Math.floor(seconds / 60)}m` : `${seconds}s`}`
        : "expired"
      : "";
  }
  $("approvals-count").textContent = `${approvals.length}${more ? "+" : ""}`;
  $("approvals-empty").hidden = approvals.length > 0;
}

// ---- patrol runs ----

const PATROL_RUNS_SHOWN = 5;

/** Each run beside the one before it (of the same golden set): its success, the change, and what did not match. */
function renderPatrol({ runs = [] }) {
  const rows = runs.slice(0, PATROL_RUNS_SHOWN).map((run, i) => {
    const ratio = run.successRatio ?? 0;
    const before = runs[i + 1];
    const comparable = before && before.tasksSha256 === run.tasksSha256;
    const change = comparable ? (ratio - (before.successRatio ?? 0)) * 100 : undefined;
    const failed = ratio < (run.threshold ?? 0);
    const mismatches = (run.mismatches ?? []).map((m) => m.taskId);
    return h(
      "tr",
      { "data-testid": "patrol-row", class: failed ? "bad-text" : "" },
      h(
        "td",
        { title: `${run.dryRun ? "dry run" : "live"} · recorded by ${run.recordedBy ?? ""}` },
        new Date(run.finishedAt).toLocaleString(),
      ),
      h("td", { class: "num", "data-testid": "patrol-success" }, `${(ratio * 100).toFixed(1)}%${failed ? " ✗" : ""}`),
      h(
        "td",
        { class: "num", "data-testid": "patrol-change" },
        change === undefined ? "–" : `${change >= 0 ? "+" : ""}${change.toFixed(1)}`,
      ),
      h("td", { class: "num" }, `${run.passed ?? 0}/${run.tasks ?? 0}`),
      h(
        "td",
        { class: "mono", title: mismatches.join(", ") },
        mismatches.length === 0
          ? "none"
          : `${mismatches.slice(0, 3).join(", ")}${mismatches.length > 3 ? ` +${mismatches.length - 3}` : ""}`,
      ),
    );
  });
  $("patrol-body").replaceChildren(...rows);
  $("patrol-empty").hidden = rows.length > 0;
}

// ---- one session ----

function openSession(id) {
  view.selected = id;
  view.lastDetail = "";
  $("detail").hidden = false;
  $("detail-id").textContent = id;
  $("detail-body").replaceChildren(h("p", { class: "muted" }, "loading…"));
  for (const row of $("sessions-body").children) row.classList.toggle("selected", row.dataset.sessionId === id);
  schedule(0);
}

function closeSession() {
  view.selected = null;
  $("detail").hidden = true;
  for (const row of $("sessions-body").children) row.classList.remove("selected");
}

function fact(label, value, testid) {
  return h("div", { class: "fact" }, h("dt", {}, label), h("dd", { "data-testid": testid }, value));
}

/** A table of `rows` under one head row of `head` cells. */
function table(attrs, head, rows) {
  return h("table", attrs, h("thead", {}, h("tr", {}, head)), h("tbody", {}, rows));
}

/** A head cell; `cls` "num" right-aligns a column of numbers. */
const th = (label, cls) => h("th", { class: cls }, label);

const BUDGET_LABELS = {
  steps: "steps",
  tool_calls: "tool calls",
  tokens: "tokens",
  cost_micros: "cost (µ)",
  wall_clock_ms: "wall clock (ms)",
};

function renderBudget(rows) {
  return table(
    { class: "grid compact budget", "data-testid": "budget" },
    [th("budget"), th("used", "num"), th("limit", "num"), th("left", "num"), th("")],
    rows.map((r) => {
      const share = r.limit > 0 ? Math.min(1, r.used / r.limit) : 0;
      return h(
        "tr",
        { "data-testid": "budget-row", "data-budget": r.name },
        h("td", {}, BUDGET_LABELS[r.name] ?? r.name),
        h("td", { class: "num" }, r.used.toLocaleString()),
        h("td", { class: "num" }, r.limit.toLocaleString()),
        h("td", { class: "num", "data-testid": "budget-left" }, r.left.toLocaleString()),
        h(
          "td",
          { class: "bar-cell" },
          h(
            "span",
            { class: `bar ${share >= 0.8 ? "hot" : ""}` },
            h("span", { class: "bar-fill", style: { width: `${(share * 100).toFixed(1)}%` } }),
          ),
        ),
      );
    }),
  );
}

function renderTimeline(transitions) {
  const start = transitions.length > 0 ? Date.parse(transitions[0].at) : 0;
  return h(
    "ol",
    { class: "timeline", "data-testid": "timeline" },
    transitions.map((t) =>
      h(
        "li",
        { "data-testid": "timeline-item", "data-to": t.to, class: `to-${t.to.toLowerCase()}` },
        h("span", { class: "t-time mono", title: t.at }, `+${((Date.parse(t.at) - start) / 1000).toFixed(2)}s`),
        h("span", { class: "t-move" }, stateChip(t.from), " → ", stateChip(t.to)),
        h("span", { class: "t-reason" }, t.reason ?? ""),
        t.tool ? h("span", { class: "chip tool" }, t.tool) : null,
        t.outcome ? h("span", { class: "muted" }, t.outcome) : null,
      ),
    ),
  );
}

function renderToolResults(steps) {
  const calls = steps.filter((s) => s.record?.decision?.kind === "tool_call");
  if (calls.length === 0) return h("p", { class: "muted" }, "No tool results yet.");
  return table(
    { class: "grid compact", "data-testid": "tool-results" },
    [th("step"), th("tool"), th("result"), th("served from"), th("ms", "num"), th("attempt", "num")],
    calls.map((s) => {
      const result = s.record.result ?? {};
      const served = s.record.decision.served_from ?? result.servedFrom ?? "";
      const outcome = result.ok
        ? "ok"
        : `${result.error?.code ?? "error"}${result.error?.message ? `: ${result.error.message}` : ""}`;
      return h(
        "tr",
        { "data-testid": "tool-result" },
        h("td", { class: "num" }, String(s.step)),
        h("td", { class: "mono" }, s.record.decision.name ?? ""),
        h("td", { class: result.ok ? "" : "bad-text", title: outcome }, outcome),
        h("td", {}, h("span", { class: `chip served-${served}`, "data-testid": "served-from" }, served)),
        h("td", { class: "num" }, String(Math.round(Number(s.record.duration_ms ?? 0)))),
        h("td", { class: "num" }, String(s.record.attempt ?? 1)),
      );
    }),
  );
}

function renderLogs(lines) {
  if (lines.length === 0)
    return h("p", { class: "muted", "data-testid": "logs" }, "No log lines kept for this session.");
  const skip = new Set(["time", "level", "msg", "service"]);
  return h(
    "ol",
    { class: "logs mono", "data-testid": "logs" },
    lines.map((line) =>
      h(
        "li",
        { class: `log-${line.level ?? "info"}` },
        h("span", { class: "muted" }, String(line.time ?? "").slice(11, 23)),
        " ",
        h("span", { class: "log-level" }, String(line.level ?? "")),
        " ",
        h("span", { class: "log-msg" }, String(line.msg ?? "")),
        " ",
        h(
          "span",
          { class: "muted" },
          Object.entries(line)
            .filter(([k]) => !skip.has(k))
            .map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`)
            .join(" "),
        ),
      ),
    ),
  );
}

function renderDetail(detail) {
  const s = detail.session;
  const state = stateName(s.state);
  $("detail-cancel").hidden = TERMINAL.has(state);
  const body = [
    h(
      "div",
      { class: "detail-state" },
      h("span", { "data-testid": "detail-state" }, stateChip(s.state)),
      s.stopReason ? h("span", { class: "muted", "data-testid": "detail-stop" }, s.stopReason) : null,
      s.outcome
        ? h(
            "span",
            { class: "muted", "data-testid": "detail-outcome" },
            `outcome: ${s.outcome.kind}${s.outcome.reason ? ` (${s.outcome.reason})` : ""}`,
          )
        : null,
      s.confidence !== undefined
        ? h(
            "span",
            { class: "muted", "data-testid": "detail-confidence" },
            `confidence: ${s.confidence}${s.uncertaintyReason ? ` (${s.uncertaintyReason})` : ""}`,
          )
        : null,
      healthBar(s.healthScore),
    ),
    h(
      "dl",
      { class: "facts" },
      fact("goal", s.goal, "detail-goal"),
      fact("trace id", s.traceId, "detail-trace-id"),
      fact("policy", s.policy, "detail-policy"),
      fact("scopes", s.scopes.join(" "), "detail-scopes"),
      fact("created", new Date(s.createdAt).toLocaleString(), "detail-created"),
      fact("created by", s.createdBy || "unknown", "detail-created-by"),
      fact("updated", `${new Date(s.updatedAt).toLocaleString()} (${ago(s.updatedAt)})`, "detail-updated"),
    ),
  ];
  if (s.pendingApproval) {
    const a = s.pendingApproval;
    body.push(
      h(
        "div",
        { class: "callout warn", "data-testid": "detail-approval" },
        h("strong", {}, `Waiting for approval of ${a.tool}: `),
        a.reason,
        h("code", { class: "approval-args" }, JSON.stringify(a.arguments ?? {})),
      ),
    );
  }
  if (s.parked) {
    const p = s.parked;
    body.push(
      h(
        "div",
        { class: "callout warn", "data-testid": "detail-parked" },
        h("strong", {}, `Waiting for ${p.tool}: `),
        `${p.reason}; tried again at ${new Date(p.wakeAt).toLocaleTimeString()} (sooner if it recovers), parked ${p.attempts} time(s) since ${new Date(p.since).toLocaleTimeString()}`,
      ),
    );
  }
  if (s.answer)
    body.push(
      h("div", { class: "callout answer", "data-testid": "detail-answer" }, h("strong", {}, "Answer "), s.answer),
    );
  body.push(
    h("h3", {}, "Budget"),
    renderBudget(detail.budget),
    h("h3", {}, `Timeline (${detail.transitions.length} transitions)`),
    renderTimeline(detail.transitions),
    h("h3", {}, "Tool results"),
    renderToolResults(detail.steps),
    h("h3", {}, "Last log lines"),
    renderLogs(detail.logs),
  );
  $("detail-body").replaceChildren(...body);
}

async function refreshDetail() {
  const id = view.selected;
  if (!id) return;
  try {
    const detail = await rpc("GetSessionDetail", { sessionId: id });
    if (view.selected !== id) return;
    // Unchanged data is not re-rendered, so a text selection in the panel survives the poll.
    const fingerprint = JSON.stringify([
      detail.session.version,
      detail.session.state,
      detail.steps.length,
      detail.logs.length,
      detail.session.pendingApproval?.approvalId,
    ]);
    if (fingerprint === view.lastDetail && TERMINAL.has(stateName(detail.session.state))) return;
    view.lastDetail = fingerprint;
    renderDetail(detail);
  } catch (error) {
    if (view.selected === id) $("detail-body").replaceChildren(h("p", { class: "bad-text" }, error.message));
  }
}

// ---- start form ----

function fillPreset(name) {
  const preset = PRESETS[name];
  $("start-goal").value = preset.goal;
  $("start-task").value = JSON.stringify(preset.task, null, 2);
}

async function startSession(event) {
  event.preventDefault();
  const result = $("start-result");
  result.className = "result";
  let task;
  try {
    task = JSON.parse($("start-task").value.trim() || "{}");
    if (!task || typeof task !== "object" || Array.isArray(task)) throw new Error("it must be a JSON object");
  } catch (error) {
    result.textContent = `The task is not valid JSON: ${error.message}`;
    result.classList.add("bad-text");
    return;
  }
  const body = {
    goal: $("start-goal").value.trim(),
    task,
    policy: $("start-policy").value,
    scopes: $("start-scopes")
      .value.split(/[\s,]+/)
      .filter(Boolean),
  };
  $("start-submit").disabled = true;
  result.textContent = "starting…";
  try {
    const { session, created } = await rpc("StartSession", body);
    result.replaceChildren(
      created ? "Started " : "Already running: ",
      h(
        "button",
        {
          type: "button",
          class: "link mono",
          "data-testid": "start-session-id",
          onclick: () => openSession(session.sessionId),
        },
        session.sessionId,
      ),
    );
    schedule(0);
  } catch (error) {
    result.textContent = error.message;
    result.classList.add("bad-text");
  } finally {
    $("start-submit").disabled = false;
  }
}

// ---- polling ----

async function refresh() {
  if (view.paused || !view.token) return;
  const cursor = view.cursors[view.pageIndex] ?? "";
  const list = {
    pageSize: PAGE_SIZE,
    pageToken: cursor,
    ...(view.filter ? { state: `SESSION_STATE_${view.filter}` } : {}),
  };
  const results = await Promise.allSettled([
    rpc("GetOverview").then(renderCounts),
    rpc("ListSessions", list).then(renderSessions),
    rpc("ListToolStats").then(renderTools),
    rpc("GetTimeSeries").then(renderSeries),
    rpc("ListApprovals").then(renderApprovals),
    rpc("ListPatrolRuns", { limit: PATROL_RUNS_SHOWN + 1 }).then(renderPatrol),
    refreshDetail(),
  ]);
  if (view.paused) return;
  const failed = results.find((r) => r.status === "rejected");
  if (failed) setStatus(`error: ${failed.reason?.message ?? failed.reason}`, "bad");
  else setStatus(`live · ${new Date().toLocaleTimeString()}`, "good");
}

function schedule(delay = POLL_MS) {
  clearTimeout(view.timer);
  view.timer = setTimeout(async () => {
    try {
      await refresh();
    } finally {
      if (!view.paused) schedule();
    }
  }, delay);
}

function init() {
  const linkProblem = takeTokenFromFragment();
  $("state-filter").replaceChildren(
    h("option", { value: "" }, "all states"),
    ...STATES.map((s) => h("option", { value: s }, s)),
  );
  $("state-filter").addEventListener("change", (e) => setFilter(e.target.value));
  $("page-next").addEventListener("click", () => {
    if (!view.nextCursor) return;
    view.cursors = view.cursors.slice(0, view.pageIndex + 1);
    view.cursors.push(view.nextCursor);
    view.pageIndex += 1;
    schedule(0);
  });
  $("page-prev").addEventListener("click", () => {
    if (view.pageIndex === 0) return;
    view.pageIndex -= 1;
    schedule(0);
  });
  $("detail-close").addEventListener("click", closeSession);
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && view.selected) closeSession();
  });
  $("detail-cancel").addEventListener("click", async () => {
    const id = view.selected;
    if (!id) return;
    try {
      await rpc("CancelSession", { sessionId: id, reason: "cancelled from the dashboard" });
      schedule(0);
    } catch (error) {
      $("detail-body").prepend(h("p", { class: "bad-text" }, error.message));
    }
  });
  $("start-form").addEventListener("submit", startSession);
  for (const button of document.querySelectorAll("[data-preset]"))
    button.addEventListener("click", () => fillPreset(button.dataset.preset));
  $("token-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const token = $("token-input").value.trim();
    $("token-input").value = "";
    if (token) useToken(token);
  });
  $("sign-out").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    view.token = "";
    askForToken("Token forgotten. Paste a new one to continue.");
  });
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (linkProblem) askForToken(linkProblem);
  else if (token) useToken(token);
  else askForToken("No token yet.");
}

init();
