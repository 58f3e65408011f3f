// SPDX-License-Identifier: Apache-2.0
#include "util/memory.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <limits>

#include <fmt/format.h>

namespace dcp::internal {

int64_t ProcessMemoryBytes() {
  int64_t bytes = 0;
  const long pages = sysconf(_SC_PHYS_PAGES), page_bytes = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page_bytes > 0 && pages <= std::numeric_limits<int64_t>::max() / page_bytes) {
    bytes = static_cast<int64_t>(pages) * page_bytes;
  }
  rlimit address_space{};
  if (getrlimit(RLIMIT_AS, &address_space) == 0 && address_space.rlim_cur != RLIM_INFINITY) {
    const auto limit = static_cast<int64_t>(std::min<rlim_t>(
        address_space.rlim_cur, static_cast<rlim_t>(std::numeric_limits<int64_t>::max())));
    bytes = bytes == 0 ? limit : std::min(bytes, limit);
  }
  return bytes;
}

int64_t PlanningMemoryLimit(int64_t max_planning_bytes) {
  if (max_planning_bytes > 0) return max_planning_bytes;
  const int64_t bytes = ProcessMemoryBytes();
  if (bytes == 0) return std::numeric_limits<int64_t>::max();
  return static_cast<int64_t>(0.8 * static_cast<double>(bytes));
}

std::string ReadableBytes(int64_t bytes) {
  const double gib = static_cast<double>(bytes) / (1 << 30);
  return gib >= 0.1 ? fmt::format("{:.1f} GiB", gib) : fmt::format("{} bytes", bytes);
}

}  // namespace dcp::internal
