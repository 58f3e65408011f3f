// SPDX-License-Identifier: Apache-2.0
// ScheduleBySimulation (include/dcp/sim.h): the division count chosen by replaying the plans.
#include <optional>
#include <utility>
#include <vector>

#include "dcp/sim.h"
#include "util/parallel.h"

namespace dcp {
namespace {

struct Tried {
  Schedule schedule;
  double seconds = 0;
};

// `schedule` compiled and replayed on `cluster`.
Result<Tried> Replay(const Batch& batch, const BlockSet& blocks, const Placement& placement,
                     const Topology& topology, Schedule schedule, const ClusterSpec& cluster) {
  DCP_ASSIGN_OR_RETURN(const Plan plan, CompilePlan(batch, blocks, placement, schedule, topology));
  DCP_ASSIGN_OR_RETURN(const SimReport report, SimulatePlan(plan, cluster));
  return Tried{.schedule = std::move(schedule), .seconds = report.total_s()};
}

}  // namespace

Result<Schedule> ScheduleBySimulation(const Batch& batch, const BlockSet& blocks,
                                      const Placement& placement, const Topology& topology,
                                      const ScheduleOptions& options, const ClusterSpec& cluster) {
  DCP_ASSIGN_OR_RETURN(Schedule chosen, ScheduleDivisions(blocks, placement, topology, options));
  if (options.divisions != 0 || chosen.n_divisions == 1)
    return chosen;  // fixed, or nothing to hide
  // The cost model's choice, then every other count, each on one of options.threads threads; the
  // fastest wins, ties to the earlier in that order, so the thread count changes nothing.
  std::vector<int32_t> counts = {chosen.n_divisions};
  for (int32_t n = 2; n <= kMaxDivisions; ++n) {
    if (n != chosen.n_divisions) counts.push_back(n);
  }
  std::vector<std::optional<Result<Tried>>> tried(counts.size());
  internal::ParallelFor(static_cast<int32_t>(counts.size()), options.threads, [&](int32_t i) {
    Result<Schedule> schedule = chosen;
    if (i > 0) {
      ScheduleOptions fixed = options;
      fixed.divisions = counts[i];
      fixed.threads = 1;
      schedule = ScheduleDivisions(blocks, placement, topology, fixed);
    }
    tried[i] = schedule.ok()
                   ? Replay(batch, blocks, placement, topology, *std::move(schedule), cluster)
                   : Result<Tried>(schedule.status());
  });
  size_t best = 0;
  for (size_t i = 0; i < tried.size(); ++i) {
    DCP_RETURN_IF_ERROR(tried[i]->status());
    if ((*tried[i])->seconds < (*tried[best])->seconds) best = i;
  }
  return std::move(*tried[best]).value().schedule;
}

}  // namespace dcp
