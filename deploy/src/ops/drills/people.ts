// The people a drill acts as, with the local suite's keys: sessions started by the requester,
// approvals answered by the approver, the ledger audited and faults switched by the operator.
import { PEOPLE, type PersonKey, type PersonRole, personKey } from "@loopguard/tool-sdk";

export type DrillPeople = Readonly<Record<PersonRole, PersonKey>>;

/** The local people's keys (<LOOPGUARD_DATA_DIR>/keys/NAME.jwk), bound in the JWKS (LOOPGUARD_JWKS_FILE, else the local one). */
export function drillPeople(env: Readonly<Record<string, string | undefined>>): DrillPeople {
  const own = { LOOPGUARD_DATA_DIR: env.LOOPGUARD_DATA_DIR, LOOPGUARD_JWKS_FILE: env.LOOPGUARD_JWKS_FILE };
  return Object.fromEntries(PEOPLE.map((p) => [p, personKey(own, p)])) as Record<PersonRole, PersonKey>;
}
