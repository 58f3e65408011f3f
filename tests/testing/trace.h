// SPDX-License-Identifier: Apache-2.0
// Reading a Chrome/Perfetto trace as the simulator writes it (src/sim/trace.h): the slices of
// each track, so tests can check that no two of one track overlap.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

namespace dcp::testing {

// The complete ("X") slices that start before an earlier slice of their track (pid, tid) ends.
// Times are compared in whole nanoseconds, as Perfetto does: the trace's microseconds have three
// decimals, so rounding recovers them exactly, with no error from adding two doubles.
inline int64_t CountOverlappingSlices(const nlohmann::json& trace) {
  std::map<std::pair<int64_t, int64_t>, std::vector<std::pair<int64_t, int64_t>>> tracks;
  const auto nanos = [](const nlohmann::json& micros) {
    return std::llround(micros.get<double>() * 1000);
  };
  for (const nlohmann::json& e : trace["traceEvents"]) {
    if (e.value("ph", "") != "X") continue;
    const int64_t begin = nanos(e["ts"]);
    tracks[{e["pid"].get<int64_t>(), e["tid"].get<int64_t>()}].emplace_back(
        begin, begin + nanos(e["dur"]));
  }
  int64_t overlapping = 0;
  for (auto& [track, slices] : tracks) {
    std::sort(slices.begin(), slices.end());
    int64_t end = 0;
    for (const auto& [b, e] : slices) {
      if (b < end) ++overlapping;
      end = std::max(end, e);
    }
  }
  return overlapping;
}

}  // namespace dcp::testing
