// The pepper every risk test keys customers with (a real one is a secret of its own per deployment).
import { CustomerKeys } from "../src/risk-store.js";

export const TEST_PEPPER = "risk-test-pepper-0123456789abcdef0123456789";
export const testKeys = new CustomerKeys(TEST_PEPPER);
