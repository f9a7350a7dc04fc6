// RiskStore: customer risk scores on SQLite (one process) or PostgreSQL (several replicas),
// keyed by an HMAC-SHA256 of (id card, E.164 phone) under a secret pepper, so the database never
// holds either raw value and its keys cannot be brute-forced from the few billion possible id
// cards without the pepper. Both backends share the keying, the schema history and the demo seed.
import { createHash, createHmac } from "node:crypto";
import type { Migration } from "@loopguard/sql-store";
import { DEMO_CUSTOMERS, type DemoCustomer } from "./demo-customers.js";

export interface CustomerRisk {
  /** -1 .. 100; -1 when the score could not be computed. */
  readonly riskScore: number;
  /** Operator-readable; never contains the id card or phone. */
  readonly reason: string;
  readonly factors: string[];
}

export interface RiskStore {
  /**
   * False makes every read fail as if the backend were down; drills and tests flip it to
   * exercise the BACKEND_DOWN path without damaging the database.
   */
  available: boolean;
  /** Names of the schema migrations opening this store applied (empty when it was current). */
  readonly migrationsApplied: readonly string[];
  /** The customer's risk, or undefined when no customer has this id card and phone. */
  find(idCard: string, phone: string): Promise<CustomerRisk | undefined>;
  /** The risk of the customer holding this customer id (as an order names it), or undefined. */
  findByCustomerId(customerId: string): Promise<CustomerRisk | undefined>;
  /** Number of customers stored (with a peppered key). */
  size(): Promise<number>;
  /** Rows an earlier layout keyed by bare SHA-256 that could not be re-keyed; never read. */
  unkeyedCount(): Promise<number>;
  /** Idempotent, so both a test and the server's shutdown may call it. */
  close(): Promise<void>;
}

/** The store cannot be read right now; the caller may try again later. */
export class RiskStoreUnavailableError extends Error {
  override readonly name = "RiskStoreUnavailableError";
}

/**
 * A backend's read: refused while the store is switched off or closed; a failure its database
 * names (`failed`) means the store cannot be read right now.
 */
export async function readStore<T>(
  store: { readonly available: boolean; readonly closed: boolean },
  failed: (cause: unknown) => boolean,
  work: () => T | Promise<T>,
): Promise<T> {
  if (!store.available) throw new RiskStoreUnavailableError("the risk store is switched off");
  if (store.closed) throw new RiskStoreUnavailableError("the risk store is closed");
  try {
    return await work();
  } catch (cause) {
    if (failed(cause)) throw new RiskStoreUnavailableError("the risk store cannot be read", { cause });
    throw cause;
  }
}

/** The database's keys were made with another pepper: every lookup would silently miss. */
export class PepperMismatchError extends Error {
  override readonly name = "PepperMismatchError";
}

export const MIN_PEPPER_LENGTH = 32;

/** Makes customer keys under one pepper. */
export class CustomerKeys {
  readonly #pepper: string;
  /** An HMAC of a fixed label: stored once, it tells whether a later process holds the same pepper, and nothing about the pepper. */
  readonly check: string;

  constructor(pepper: string) {
    if (pepper.length < MIN_PEPPER_LENGTH)
      throw new RangeError(`a customer key pepper has at least ${MIN_PEPPER_LENGTH} characters`);
    this.#pepper = pepper;
    this.check = createHmac("sha256", pepper).update("loopguard risk customer key pepper check").digest("hex");
  }

  /** Hex HMAC-SHA256 of the canonical id card and E.164 phone, the only identity the store keeps. */
  key(idCard: string, phone: string): string {
    return createHmac("sha256", this.#pepper).update(`${idCard}\n${phone}`).digest("hex");
  }
}

/** The key of the layout before peppering: bare SHA-256, kept only to recognise and re-key its rows. */
export function legacyCustomerKey(idCard: string, phone: string): string {
  return createHash("sha256").update(`${idCard}\n${phone}`).digest("hex");
}

/** The schema history both backends share, in order; names are never changed once released. */
const RISK_MIGRATIONS = [
  { name: "0001-customers", compatibility: "expand" },
  // Re-keys every customer: a build that looks customers up by the bare SHA-256 key finds none.
  { name: "0002-peppered-customer-keys", compatibility: "contract" },
  { name: "0003-demo-customers", compatibility: "expand" },
  // Customer ids (as orders name them) of the people scored: what GetCustomerRisk looks up.
  { name: "0004-customer-ids", compatibility: "expand" },
] as const;

/** One backend's migrations: each step of the shared history, run by that backend's `up`. */
export function riskMigrations<Db>(
  up: Record<(typeof RISK_MIGRATIONS)[number]["name"], Migration<Db>["up"]>,
): Migration<Db>[] {
  return RISK_MIGRATIONS.map((m) => ({ ...m, up: up[m.name] }));
}

/**
 * Migration 0002's plan for rows of the unpeppered layout: the demo customers' bare SHA-256 keys
 * and their peppered replacements. Any other row cannot be re-keyed (the store never had its raw
 * id card and phone) and is moved aside to customers_unkeyed.
 */
export function demoRekeying(keys: CustomerKeys, demo: readonly DemoCustomer[] = DEMO_CUSTOMERS): Map<string, string> {
  return new Map(demo.map((c) => [legacyCustomerKey(c.idCard, c.phone), keys.key(c.idCard, c.phone)]));
}

/** A stored customer row: the demo customers as the seed migration writes them. */
export function demoRows(
  keys: CustomerKeys,
  demo: readonly DemoCustomer[] = DEMO_CUSTOMERS,
): { key: string; score: number; reason: string; factors: string }[] {
  return demo.map((c) => ({
    key: keys.key(c.idCard, c.phone),
    score: c.riskScore,
    reason: c.reason,
    factors: JSON.stringify(c.factors),
  }));
}

/** The demo customers' customer ids, each with the peppered key of the person holding it. */
export function demoCustomerIds(
  keys: CustomerKeys,
  demo: readonly DemoCustomer[] = DEMO_CUSTOMERS,
): { customerId: string; key: string }[] {
  return demo.flatMap((c) => c.customerIds.map((customerId) => ({ customerId, key: keys.key(c.idCard, c.phone) })));
}

export function pepperMismatch(): PepperMismatchError {
  return new PepperMismatchError(
    "the customer key pepper (RISK_CUSTOMER_KEY_PEPPER_FILE / RISK_CUSTOMER_KEY_PEPPER) is not the one this database's keys were made with",
  );
}
