// Who the CLI acts as: one person at a time, chosen with --as NAME (or LOOPGUARD_AS; default
// requester), whose key and its binding in the JWKS decide the subject and what a token may carry.
// Nothing comes from $USER: the approver of a session is another key, so another person.
import { ConfigError, mintToken, type PersonKey, personKey, UsageError } from "@loopguard/tool-sdk";

export { UsageError } from "@loopguard/tool-sdk";

/** The person named by --as (or LOOPGUARD_AS, LOOPGUARD_SIGNING_KEY_FILE); a UsageError naming what is wrong. */
export function actingPerson(as: string | undefined): PersonKey {
  let person: PersonKey;
  try {
    person = personKey(process.env, as);
  } catch (error) {
    throw new UsageError(
      error instanceof ConfigError ? error.message : `cannot read the signing key: ${(error as Error).message}`,
    );
  }
  const { role, subject } = person.binding;
  if (role !== "person")
    throw new UsageError(
      `${person.name}'s key is a ${role} key; the CLI acts as a person (--as requester, approver, operator…)`,
    );
  if (subject.endsWith("*"))
    throw new UsageError(`${person.name}'s key is bound to the pattern "${subject}", not to one person`);
  return person;
}

/**
 * A token for the orchestrator API as `person`, carrying exactly `scopes` (what the command needs,
 * plus "grant:<scope>" for each scope it gives a new session). A scope the person's key may not
 * carry is refused here, naming it, rather than by the server.
 */
export function apiToken(
  person: PersonKey,
  what: string,
  scopes: readonly string[],
  ttlSeconds = 3600,
): Promise<string> {
  const beyond = person.scopeBeyond(scopes);
  if (beyond !== undefined)
    throw new UsageError(
      `${person.name} may not ${what}: its key does not carry "${beyond}"${beyond === "approvals:write" ? " (approve --as approver)" : ""}`,
    );
  return mintToken(person.key, { subject: person.binding.subject, audience: "orchestrator", scopes, ttlSeconds });
}
