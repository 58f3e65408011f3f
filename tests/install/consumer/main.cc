// SPDX-License-Identifier: Apache-2.0
// Plans a small batch on 1 node x 2 devices with the installed library and checks the plan.
#include <cstdio>
#include <utility>

#include "dcp/dcp.h"
#include "dcp/planner.h"

namespace {

dcp::Status Run() {
  DCP_ASSIGN_OR_RETURN(dcp::MaskSpec causal, dcp::MaskSpec::Parse("causal"));
  DCP_ASSIGN_OR_RETURN(dcp::Batch batch,
                       dcp::Batch::Create({4096, 1024, 512}, {causal}, dcp::AttentionShape{}));
  const dcp::PlanOptions options =
      dcp::SinglePassOptions({.nodes = 1, .devices_per_node = 2}, 512);
  DCP_ASSIGN_OR_RETURN(dcp::PlannedBatch planned, dcp::PlanBatch(batch, options));
  return dcp::ValidatePlan(planned.plan);
}

}  // namespace

int main() {
  dcp::Status status = Run();
  if (!status.ok()) {
    std::fprintf(stderr, "consumer: %s\n", status.ToString().c_str());
    return 1;
  }
  std::printf("consumer: planned and validated a 3-sequence batch on 1x2 devices\n");
  return 0;
}
