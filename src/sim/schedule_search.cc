// SPDX-License-Identifier: Apache-2.0
// ScheduleBySimulation (include/dcp/sim.h): the division count chosen by replaying the plans.
#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "dcp/sim.h"
#include "util/parallel.h"

namespace dcp {
namespace {

// The coarse grid of division counts: 2 and every multiple of this up to kMaxSearchedDivisions.
constexpr int32_t kGridStep = 4;

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
  // Time falls with the count while more transfers hide behind compute, then flattens, with
  // bumps of a few percent: a coarse grid finds the flat part, and its best count's neighbours
  // polish it (within 1% of trying every count on the batches measured, at half the replays).
  std::vector<int32_t> counts = {chosen.n_divisions};
  const auto add = [&](int32_t n) {
    if (n >= 2 && n <= kMaxSearchedDivisions &&
        std::find(counts.begin(), counts.end(), n) == counts.end()) {
      counts.push_back(n);
    }
  };
  add(2);
  for (int32_t n = kGridStep; n <= kMaxSearchedDivisions; n += kGridStep) add(n);
  std::vector<std::optional<Result<Tried>>> tried;
  // Replays counts[tried.size()..] on options.threads threads. The fastest wins, ties to the
  // earlier count in `counts`, so the thread count changes nothing.
  const auto replay_new = [&]() -> Result<size_t> {
    const size_t first = tried.size();
    tried.resize(counts.size());
    internal::ParallelFor(
        static_cast<int32_t>(counts.size() - first), options.threads, [&](int32_t k) {
          const size_t i = first + k;
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
    return best;
  };
  DCP_ASSIGN_OR_RETURN(const size_t grid_best, replay_new());
  add(counts[grid_best] - 1);
  add(counts[grid_best] + 1);
  DCP_ASSIGN_OR_RETURN(const size_t best, replay_new());
  return std::move(*tried[best]).value().schedule;
}

}  // namespace dcp
