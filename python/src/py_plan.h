// SPDX-License-Identifier: Apache-2.0
// dcp.Plan's C++ side, shared by the plan and executor bindings.
#pragma once

#include <pybind11/pybind11.h>

#include <optional>
#include <string>

#include "dcp/planner.h"
#include "dcp/token_map.h"

namespace dcp::python {

// A plan and what is known of how it was made (nothing for a plan decoded from bytes).
struct PyPlan {
  Plan plan = {};
  std::optional<PlanningTimes> times = {};  // absent for a decoded plan or a baseline
  double simulated_s = 0;                   // of the tuning, 0 without one
  std::vector<CandidateOutcome> candidates = {};  // of the tuning
  std::optional<TokenMap> token_map = {};   // made on first use

  const TokenMap& Map() {
    if (!token_map) token_map = TokenMap::Of(plan);
    return *token_map;
  }
  DeviceId Rank(int64_t rank) const {
    const int32_t devices = plan.topology.devices();
    if (rank < 0 || rank >= devices) {
      throw pybind11::value_error("rank " + std::to_string(rank) + " is not a device of this " +
                                  plan.topology.ToString() + " plan (0.." +
                                  std::to_string(devices - 1) + ")");
    }
    return DeviceId{static_cast<int32_t>(rank)};
  }
};

}  // namespace dcp::python
