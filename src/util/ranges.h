// SPDX-License-Identifier: Apache-2.0
// Half-open ranges [first, second) sorted and merged where they overlap or touch.
#pragma once

#include <algorithm>
#include <utility>
#include <vector>

namespace dcp::internal {

template <typename T>
void SortAndMergeRanges(std::vector<std::pair<T, T>>* ranges) {
  std::sort(ranges->begin(), ranges->end());
  size_t merged = 0;
  for (const auto& r : *ranges) {
    if (merged > 0 && r.first <= (*ranges)[merged - 1].second) {
      (*ranges)[merged - 1].second = std::max((*ranges)[merged - 1].second, r.second);
    } else {
      (*ranges)[merged++] = r;
    }
  }
  ranges->resize(merged);
}

}  // namespace dcp::internal
