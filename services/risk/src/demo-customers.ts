// Fictional customers seeded into a new risk store so the suite works out of the box. The id
// cards are made up (Beijing Dongcheng region 110101, birth dates 1980..2000) but carry correct
// GB 11643 check characters; the phones are well-formed CN mobiles. The raw values live here
// only for the README and tests: the store keeps their hashes.

export interface DemoCustomer {
  /** Canonical id card number (upper-case X). */
  readonly idCard: string;
  /** E.164 mobile number. */
  readonly phone: string;
  /** The customer ids (billing's Order.customer_id) this person holds. */
  readonly customerIds: readonly string[];
  readonly riskScore: number;
  readonly reason: string;
  readonly factors: readonly string[];
}

export const DEMO_CUSTOMERS: readonly DemoCustomer[] = [
  {
    idCard: "110101198003121232",
    phone: "+8613800138000",
    customerIds: ["cust_demo_0001", "cust_demo_0006", "cust_demo_0007"],
    riskScore: 5,
    reason: "Long-standing customer with a clean payment and refund history.",
    factors: ["account_age_over_5y", "no_chargebacks"],
  },
  {
    idCard: "110101198507212349",
    phone: "+8613912345678",
    customerIds: ["cust_demo_0002"],
    riskScore: 23,
    reason: "Established customer; a few late payments in the last twelve months.",
    factors: ["late_payments_12m"],
  },
  {
    idCard: "11010119830405052X",
    phone: "+8615012345678",
    customerIds: ["cust_demo_0005"],
    riskScore: 48,
    reason: "Moderate risk: refunds were requested on a third of recent orders.",
    factors: ["refund_rate_high", "recent_address_change"],
  },
  {
    idCard: "110101199212084567",
    phone: "+8618612345678",
    customerIds: ["cust_demo_0003"],
    riskScore: 71,
    reason: "Elevated risk: several disputed payments and a recently changed phone number.",
    factors: ["disputed_payments", "phone_changed_30d"],
  },
  {
    idCard: "110101199810246781",
    phone: "+8617712345678",
    customerIds: ["cust_demo_0008"],
    riskScore: 92,
    reason: "High risk: chargebacks on several orders and identity details shared with other accounts.",
    factors: ["chargebacks_multiple", "shared_identity_signals", "order_velocity_spike"],
  },
  {
    idCard: "110101200002297893",
    phone: "+8619912345678",
    customerIds: ["cust_demo_0004"],
    riskScore: -1,
    reason: "Score could not be computed: insufficient history.",
    factors: ["account_age_under_30d"],
  },
];
