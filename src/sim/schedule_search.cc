// SPDX-License-Identifier: Apache-2.0
// ScheduleBySimulation (include/dcp/sim.h): the division count chosen by replaying the plans.
#include "dcp/sim.h"

namespace dcp {

Result<Schedule> ScheduleBySimulation(const Batch& batch, const BlockSet& blocks,
                                      const Placement& placement, const Topology& topology,
                                      const ScheduleOptions& options, const ClusterSpec& cluster) {
  DCP_ASSIGN_OR_RETURN(Schedule best, ScheduleDivisions(blocks, placement, topology, options));
  if (options.divisions != 0 || best.n_divisions == 1) return best;  // fixed, or nothing to hide
  DCP_ASSIGN_OR_RETURN(Plan plan, CompilePlan(batch, blocks, placement, best, topology));
  DCP_ASSIGN_OR_RETURN(SimReport report, SimulatePlan(plan, cluster));
  double best_s = report.total_s();
  for (int32_t n = 2; n <= kMaxDivisions; ++n) {
    if (n == best.n_divisions) continue;
    ScheduleOptions fixed = options;
    fixed.divisions = n;
    DCP_ASSIGN_OR_RETURN(Schedule schedule, ScheduleDivisions(blocks, placement, topology, fixed));
    DCP_ASSIGN_OR_RETURN(plan, CompilePlan(batch, blocks, placement, schedule, topology));
    DCP_ASSIGN_OR_RETURN(report, SimulatePlan(plan, cluster));
    if (report.total_s() < best_s) {
      best = std::move(schedule);
      best_s = report.total_s();
    }
  }
  return best;
}

}  // namespace dcp
