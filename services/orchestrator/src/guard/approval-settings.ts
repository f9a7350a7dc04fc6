// The approval rules from the environment (APPROVAL_*, CONFIDENCE_THRESHOLD), over DEFAULT_APPROVAL_RULES.
import { type ApprovalField, ConfigError, fractionSetting, integerSetting } from "@loopguard/tool-sdk";
import { type AmountThresholds, type ApprovalRules, DEFAULT_APPROVAL_RULES } from "./approvals.js";

type Env = Readonly<Record<string, string | undefined>>;

const MAX_AMOUNT = 1_000_000_000_000;
const DAY_MS = 24 * 3600_000;

/**
 * Per-currency thresholds: "CNY:350000,JPY:7000000" (ISO 4217 code, a colon, minor units), one
 * variable per kind of total.
 */
function thresholdsByCurrency(
  env: Env,
  names: Record<keyof AmountThresholds, string>,
): ApprovalRules["amountsByCurrency"] {
  const out: Record<string, Partial<Record<keyof AmountThresholds, number>>> = {};
  for (const [kind, name] of Object.entries(names) as [keyof AmountThresholds, string][]) {
    const raw = env[name]?.trim();
    if (!raw) continue;
    for (const entry of raw.split(",")) {
      const match = /^\s*([A-Z]{3})\s*:\s*(\d{1,13})\s*$/.exec(entry);
      const amount = Number(match?.[2]);
      if (!match || amount > MAX_AMOUNT)
        throw new ConfigError(
          `${name} must be CODE:AMOUNT[,CODE:AMOUNT…] with an ISO 4217 code and minor units up to ${MAX_AMOUNT}, got "${entry}"`,
        );
      out[match[1]!] = { ...out[match[1]!], [kind]: amount };
    }
  }
  return out;
}

function amount(env: Env, name: string, fallback: number): number {
  return integerSetting(env, name, { default: fallback, min: 0, max: MAX_AMOUNT });
}

/** `fields`: the approval settings the tools' contracts declare, each read as APPROVAL_<SETTING>_THRESHOLD. */
export function approvalSettings(env: Env, fields: readonly ApprovalField[]): ApprovalRules {
  const defaults = DEFAULT_APPROVAL_RULES;
  return {
    amounts: {
      entity: amount(env, "APPROVAL_AMOUNT_THRESHOLD_CENTS", defaults.amounts.entity),
      session: amount(env, "APPROVAL_SESSION_AMOUNT_THRESHOLD_CENTS", defaults.amounts.session),
      customer: amount(env, "APPROVAL_CUSTOMER_AMOUNT_THRESHOLD", defaults.amounts.customer),
    },
    amountsByCurrency: thresholdsByCurrency(env, {
      entity: "APPROVAL_AMOUNT_THRESHOLDS",
      session: "APPROVAL_SESSION_AMOUNT_THRESHOLDS",
      customer: "APPROVAL_CUSTOMER_AMOUNT_THRESHOLDS",
    }),
    customerWindowMs: integerSetting(env, "APPROVAL_CUSTOMER_WINDOW_MS", {
      default: defaults.customerWindowMs,
      min: 60_000,
      max: 366 * DAY_MS,
    }),
    thresholds: Object.fromEntries(
      fields.map((f) => [
        f.setting,
        integerSetting(env, `APPROVAL_${f.setting.toUpperCase()}_THRESHOLD`, {
          default: f.defaultThreshold,
          min: 0,
          max: f.maxThreshold,
        }),
      ]),
    ),
    // 0 turns the rule off; 1 sends every stated confidence below certainty to a human.
    minConfidence: fractionSetting(env, "CONFIDENCE_THRESHOLD", defaults.minConfidence),
    ttlMs: integerSetting(env, "APPROVAL_TTL_MS", { default: defaults.ttlMs, min: 1000, max: 7 * DAY_MS }),
  };
}
