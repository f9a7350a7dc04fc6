// Who may use each trusted key: every public key of a JWKS carries a binding — its role, the
// subject its tokens must claim and the scopes they may carry — so a key signs for one identity
// only. A token whose subject or scopes go beyond its key's binding is refused, whoever signed it.
import { createPublicKey, type KeyObject, type JsonWebKey as NodeJwk } from "node:crypto";
import type { JSONWebKeySet, JWK } from "jose";
import { isEd25519, KEY_ROLES, KeyError, type KeyRole, TOKEN_ALGORITHM } from "./auth.js";
import { irreversibleScopes, readOnlyToolScopes } from "./people.js";

export interface KeyBinding {
  readonly role: KeyRole;
  /** The subject its tokens must claim: exact; only an orchestrator key's is a prefix pattern ending in "*" ("session:*"). */
  readonly subject: string;
  /** The scopes its tokens may carry: exact, "*" for any, or a prefix pattern ending in "*" ("grant:*"). */
  readonly scopes: readonly string[];
}

/** A trusted public key with its binding, ready to verify. */
export interface TrustedKey {
  readonly kid: string;
  readonly key: KeyObject;
  readonly binding: KeyBinding;
  /** Exact scopes, for a set lookup per token; patterns apart. */
  readonly exactScopes: ReadonlySet<string>;
  readonly scopePrefixes: readonly string[];
}

/** A JWKS as loopguard keeps it: public keys with bindings, and the kids revoked (never trusted or reused again). */
export interface BoundKeySet extends JSONWebKeySet {
  readonly revoked?: readonly string[];
}

/** Prefixes of subjects no local key may claim exactly: sessions are the orchestrator's, "oidc:" people come from the identity provider. */
const RESERVED_PERSON_SUBJECTS = ["session:", "oidc:"];
const SCOPE = /^[^\s*]+\*?$|^\*$/;

/** "x*" → prefix "x"; "*" → prefix "" (anything). */
function matchesPattern(pattern: string, value: string): boolean {
  return pattern.endsWith("*") ? value.startsWith(pattern.slice(0, -1)) : pattern === value;
}

export function subjectAllowed(binding: KeyBinding, subject: string): boolean {
  return matchesPattern(binding.subject, subject);
}

/** The first scope of `scopes` the key may not carry, if any. */
export function scopeBeyond(
  key: Pick<TrustedKey, "exactScopes" | "scopePrefixes">,
  scopes: Iterable<string>,
): string | undefined {
  for (const scope of scopes) {
    if (key.exactScopes.has(scope)) continue;
    if (!key.scopePrefixes.some((prefix) => scope.startsWith(prefix))) return scope;
  }
  return undefined;
}

/** Exact scopes and prefix patterns of a binding, apart. */
export function scopeMatcher(scopes: readonly string[]): Pick<TrustedKey, "exactScopes" | "scopePrefixes"> {
  return {
    exactScopes: new Set(scopes.filter((s) => !s.endsWith("*"))),
    scopePrefixes: scopes.filter((s) => s.endsWith("*")).map((s) => s.slice(0, -1)),
  };
}

/** Why a binding is not acceptable, or undefined. Shared by the JWKS check and `pnpm keys`. */
export function bindingProblem(binding: { role?: unknown; subject?: unknown; scopes?: unknown }): string | undefined {
  const { role, subject, scopes } = binding;
  if (!KEY_ROLES.includes(role as KeyRole))
    return `loopguard_role must be one of ${KEY_ROLES.join(", ")}, got ${JSON.stringify(role)}`;
  if (typeof subject !== "string" || !/^[^\s*]*\*?$/.test(subject) || subject === "")
    return `loopguard_subject must be a subject or a pattern ending in "*", got ${JSON.stringify(subject)}`;
  if (!Array.isArray(scopes) || !scopes.every((s) => typeof s === "string" && SCOPE.test(s))) {
    return `loopguard_scopes must be an array of scopes (no spaces; "*" or a prefix ending in "*" for patterns), got ${JSON.stringify(scopes)}`;
  }
  if (role === "orchestrator" && !subject.startsWith("session:"))
    return `an orchestrator key signs for sessions only: its loopguard_subject must be "session:*", got "${subject}"`;
  if (role === "probe") {
    const readOnly = readOnlyToolScopes();
    const other = (scopes as string[]).find((scope) => !readOnly.includes(scope));
    if (other !== undefined)
      return `a probe key may hold read-only scopes only (${readOnly.join(" ")}), not "${other}"`;
  }
  if (role === "break-glass") {
    // A break-glass key moves money by hand where it is switched on, nothing else: not the orchestrator's API.
    const irreversible = irreversibleScopes();
    const other = (scopes as string[]).find((scope) => !irreversible.has(scope));
    if (other !== undefined)
      return `a break-glass key may hold irreversible methods' scopes only (${[...irreversible.keys()].join(" ")}), not "${other}"`;
  }
  // Only the orchestrator's key signs for many subjects (its sessions). Every other key has one
  // holder, so it speaks for one subject: a pattern ("*", "oidc:*") would let that holder be anyone
  // it covers — read and cancel their sessions, and approve as a second person what it started.
  if (role !== "orchestrator" && subject.endsWith("*"))
    return `a ${role} key is bound to exactly one subject, never a pattern: "${subject}" would let its one holder speak for every subject it covers (only the orchestrator's key is bound to a pattern, "session:*")`;
  if (role !== "orchestrator" && RESERVED_PERSON_SUBJECTS.some((p) => subject.startsWith(p))) {
    return `a ${role} key may not claim "${subject}": subjects starting with ${RESERVED_PERSON_SUBJECTS.join(" or ")} are the orchestrator's and the identity provider's`;
  }
  return undefined;
}

export function bindingOf(jwk: Record<string, unknown>): Partial<KeyBinding> {
  return {
    role: jwk.loopguard_role as KeyRole,
    subject: jwk.loopguard_subject as string,
    scopes: jwk.loopguard_scopes as string[],
  };
}

/** The binding members a public JWK carries. */
export function withBinding<T extends object>(jwk: T, binding: KeyBinding): T {
  return {
    ...jwk,
    loopguard_role: binding.role,
    loopguard_subject: binding.subject,
    loopguard_scopes: [...binding.scopes],
  };
}

/**
 * The trusted public keys, checked: every key an Ed25519 public JWK with a unique `kid` and a
 * binding, none carrying private material (a JWKS holding a private key would hand every service
 * the power to mint), none revoked. A set may be empty only when its keys were all revoked.
 */
export function publicKeySet(value: unknown): BoundKeySet {
  const { keys, revoked = [] } = (value ?? {}) as { keys?: unknown; revoked?: unknown };
  if (!Array.isArray(keys)) throw new KeyError('a JWKS is a JSON object {"keys": [...]} with at least one key');
  if (!Array.isArray(revoked) || !revoked.every((k) => typeof k === "string"))
    throw new KeyError('the JWKS member "revoked" must be a list of kids');
  if (keys.length === 0 && revoked.length === 0)
    throw new KeyError('a JWKS is a JSON object {"keys": [...]} with at least one key');
  const kids = new Set<string>();
  for (const [i, key] of keys.entries()) {
    const jwk = key as Record<string, unknown>;
    if (!jwk || typeof jwk !== "object" || !isEd25519(jwk))
      throw new KeyError(`key ${i} of the JWKS is not an Ed25519 public key (kty OKP, crv Ed25519)`);
    if ("d" in jwk) throw new KeyError(`key ${i} of the JWKS holds private material ("d"); publish public keys only`);
    if (typeof jwk.kid !== "string" || jwk.kid === "") throw new KeyError(`key ${i} of the JWKS has no kid`);
    const kid = jwk.kid;
    if (kids.has(kid)) throw new KeyError(`two keys of the JWKS share the kid "${kid}"`);
    if (revoked.includes(kid)) throw new KeyError(`key ${kid} of the JWKS is revoked; drop it from "keys"`);
    kids.add(kid);
    if (jwk.loopguard_role === undefined) {
      throw new KeyError(
        `key ${kid} of the JWKS is bound to no one: run \`pnpm keys bind --kid ${kid} --role orchestrator|person|break-glass --subject S --scope …\``,
      );
    }
    const problem = bindingProblem(bindingOf(jwk));
    if (problem)
      throw new KeyError(
        `key ${kid} of the JWKS: ${problem} (rebind it with \`pnpm keys bind --kid ${kid} …\`, or \`pnpm keys revoke --kid ${kid}\`)`,
      );
    try {
      createPublicKey({ key: jwk as NodeJwk, format: "jwk" });
    } catch (cause) {
      throw new KeyError(`key ${kid} of the JWKS is not a valid Ed25519 public key`, { cause });
    }
  }
  const checked = keys.map((k) => ({ ...(k as JWK), alg: TOKEN_ALGORITHM, use: "sig" }));
  return revoked.length > 0 ? { keys: checked, revoked } : { keys: checked };
}

/** The keys of a checked set by kid, each with its binding. */
export function trustedKeys(set: BoundKeySet): ReadonlyMap<string, TrustedKey> {
  const out = new Map<string, TrustedKey>();
  for (const jwk of publicKeySet(set).keys) {
    const binding = bindingOf(jwk as Record<string, unknown>) as KeyBinding;
    const kid = jwk.kid as string;
    out.set(kid, {
      kid,
      key: createPublicKey({ key: jwk as NodeJwk, format: "jwk" }),
      binding,
      ...scopeMatcher(binding.scopes),
    });
  }
  return out;
}
