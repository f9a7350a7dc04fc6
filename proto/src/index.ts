// Entry point of the contracts package: the generated code lives under ./gen (do not edit it;
// run `pnpm gen`). Import a contract's module directly, e.g.
// `@loopguard/proto/gen/loopguard/billing/v1/billing_pb`.
import type { DescFile } from "@bufbuild/protobuf";
import { file_google_rpc_error_details } from "./gen/google/rpc/error_details_pb.js";
import { file_google_rpc_status } from "./gen/google/rpc/status_pb.js";
import { file_loopguard_billing_v1_billing } from "./gen/loopguard/billing/v1/billing_pb.js";
import { file_loopguard_kb_v1_kb } from "./gen/loopguard/kb/v1/kb_pb.js";
import { file_loopguard_orchestrator_v1_orchestrator } from "./gen/loopguard/orchestrator/v1/orchestrator_pb.js";
import { file_loopguard_risk_v1_risk } from "./gen/loopguard/risk/v1/risk_pb.js";
import { file_loopguard_tool_v1_admin } from "./gen/loopguard/tool/v1/admin_pb.js";
import { file_loopguard_tool_v1_errors } from "./gen/loopguard/tool/v1/errors_pb.js";
import { file_loopguard_tool_v1_options } from "./gen/loopguard/tool/v1/options_pb.js";

/** Every contract file, so registries (error reasons, reflection, Any details) can see them all. */
export const contractFiles: readonly DescFile[] = [
  file_loopguard_tool_v1_options,
  file_loopguard_tool_v1_errors,
  file_loopguard_tool_v1_admin,
  file_loopguard_kb_v1_kb,
  file_loopguard_billing_v1_billing,
  file_loopguard_risk_v1_risk,
  file_loopguard_orchestrator_v1_orchestrator,
  file_google_rpc_status,
  file_google_rpc_error_details,
];
